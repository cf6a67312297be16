package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// fence lets an API request that writes (every method but GET, HEAD and
// OPTIONS; watches are GETs) through only while this replica may write,
// and gives it a deadline at the instant that permission ends: a write in
// flight then is abandoned by the client instead of landing after another
// replica may have taken over. Every part's client goes through it (binds,
// requeue touches, events, remediation); the election's own client (the
// Lease, the replica's own Pod label) does not.
//
// It is not a fencing token: a request already sent when the replica
// stopped is applied by the API server as it arrives, up to
// LeaseDuration-RenewDeadline before another replica may act (see
// election).
type fence struct {
	next  http.RoundTripper
	until func() (time.Time, error)
}

func (f *fence) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return f.next.RoundTrip(req)
	}
	deadline, err := f.until()
	if err != nil {
		return nil, fmt.Errorf("%s %s not sent: %w", req.Method, req.URL.Path, err)
	}
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	resp, err := f.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the request's deadline when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
