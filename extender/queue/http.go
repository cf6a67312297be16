package queue

import (
	"encoding/json"
	"net/http"
)

// QueueView is the answer of GET /debug/queue: each team's queue and
// admitted use, and where every queued pod stood after the last pass.
type QueueView struct {
	// Leader is false on a standby replica, whose controller does not run
	// (its lists are empty).
	Leader bool         `json:"leader"`
	Teams  []TeamStatus `json:"teams"`
	Pods   []Position   `json:"pods"`
}

// Handler serves GET /debug/queue[?team=T]. leading says whether this
// replica runs the controller (nil: always).
func (c *Controller) Handler(leading func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pods, teams := c.Positions()
		v := QueueView{Leader: leading == nil || leading(), Teams: teams, Pods: pods}
		if t := r.URL.Query().Get("team"); t != "" {
			v.Teams, v.Pods = nil, nil
			for _, ts := range teams {
				if ts.Team == t {
					v.Teams = append(v.Teams, ts)
				}
			}
			for _, p := range pods {
				if p.Team == t {
					v.Pods = append(v.Pods, p)
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}
