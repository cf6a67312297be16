package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"time"
)

// fence lets an API request that writes (every method but GET, HEAD and
// OPTIONS; watches are GETs) through only while this replica may write: a
// request not yet sent when that permission ends is abandoned, so it never
// lands after another replica may have taken over. Once a request is
// written out, its answer is awaited as usual: abandoning it then would not
// take it back from the API server, only leave the caller unsure whether it
// happened (a bind that thinks it failed frees GPUs a bound pod holds).
// Every part's client goes through it (binds, requeue touches, events,
// remediation, the queue); the election's own client (the Lease, the
// replica's own Pod label) does not.
//
// It is not a fencing token: a request sent just before the permission
// ended is applied when the API server gets to it, which leaves
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
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(time.Until(deadline), cancel)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { timer.Stop() },
	})
	resp, err := f.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { timer.Stop(); cancel() }}
	return resp, nil
}

// cancelOnClose releases the request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
