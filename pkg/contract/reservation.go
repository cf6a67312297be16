package contract

import (
	"encoding/json"
	"time"
)

// Reservation is the queue controller's record on the pods of a queued job
// it holds room for (the ReservationAnnotation): what must survive a
// restart so that a new leader keeps the hold's age (for its bound), its
// domain (so that the plan does not move) and a cool-off after a hold that
// lapsed. The held room itself is recomputed from the API by every pass.
type Reservation struct {
	Version string `json:"version"`
	// Since is when room was first held for the job; zero while none is.
	Since time.Time `json:"since,omitzero"`
	// HoldUntil is when the hold lapses if its job has not started.
	HoldUntil time.Time `json:"holdUntil,omitzero"`
	// Domain names where it is held ("tier 0 leaf-a", "node n1", "cluster").
	Domain string `json:"domain,omitempty"`
	// ExpectedStart is the plan's expected start when the record was written
	// (informative: the Queued condition carries the current one).
	ExpectedStart time.Time `json:"expectedStart,omitzero"`
	// CooledUntil: after a hold reached its maximum it is released and the
	// job is not held for again before this time.
	CooledUntil time.Time `json:"cooledUntil,omitzero"`
	// Preview holds the next version's test fields (empty in a release).
	Preview
}

// ParseReservation decodes and validates a reservation record, under the
// version rule (versions.go).
func ParseReservation(data []byte) (Reservation, error) {
	r, err := decodeDoc[Reservation](data, "reservation")
	if err != nil {
		return Reservation{}, err
	}
	if err := r.Validate(); err != nil {
		return Reservation{}, err
	}
	return r, nil
}

// Marshal encodes r after validating it.
func (r Reservation) Marshal() ([]byte, error) {
	r.Preview.stamp(r.Version)
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// Validate checks the record.
func (r Reservation) Validate() error {
	if err := checkVersion("reservation.version", r.Version); err != nil {
		return err
	}
	if err := r.Preview.check("reservation", r.Version); err != nil {
		return err
	}
	if r.Since.IsZero() != (r.Domain == "") {
		return fieldErr("reservation.domain", r.Domain, "must be set exactly when since is", "write both or neither")
	}
	if len(r.Domain) > 253 {
		return fieldErr("reservation.domain", len(r.Domain), "is longer than 253 characters", "name a node or a tier value")
	}
	return nil
}
