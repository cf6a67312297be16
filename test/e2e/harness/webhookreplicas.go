package harness

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Webhook is one rota-admission process.
type Webhook struct {
	*Process
	// URL is the replica's own listener, https://127.0.0.1:PORT.
	URL string
}

// Signal sends sig to the replica's process group (SIGSTOP, SIGCONT).
func (w *Webhook) Signal(sig syscall.Signal) error { return SignalGroup(w.Process, sig) }

// webhookProcesses are the webhook replicas' processes.
func (e *Env) webhookProcesses() []*Process {
	var out []*Process
	for _, w := range e.Webhooks {
		out = append(out, w.Process)
	}
	return out
}

// StartWebhook starts a webhook replica (again) and waits until it answers
// /healthz; whether it then leads is the Lease's to say.
func (e *Env) StartWebhook(ctx context.Context, w *Webhook) error {
	if err := w.Start(); err != nil {
		return err
	}
	return waitHTTP(ctx, w.Process, w.URL+"/healthz", e.admClient)
}

// WebhookHTTPClient is an HTTPS client that trusts the webhook replicas'
// serving certificate.
func (e *Env) WebhookHTTPClient() *http.Client { return e.admClient }

// WebhookReady reports whether a replica answers /readyz with 200, as a
// readiness probe asks.
func (e *Env) WebhookReady(ctx context.Context, w *Webhook) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.URL+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := e.admClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startWebhookRouter is the stand-in for the webhook's Service: each
// connection goes to the next replica, in turn, of those whose /readyz
// answered 200 at the last probe (every half second, a second's timeout;
// a cluster's readiness probes are slower). A paused replica fails its
// probe and is left out until it answers again.
func (e *Env) startWebhookRouter(port int) (*Router, error) {
	var (
		mu    sync.Mutex
		ready []string
		last  time.Time
		next  atomic.Uint64
	)
	poll := func(ctx context.Context) {
		if time.Since(last) < 500*time.Millisecond {
			return
		}
		last = time.Now()
		var wg sync.WaitGroup
		ok := make([]bool, len(e.Webhooks))
		for i, w := range e.Webhooks {
			wg.Go(func() { ok[i] = w.Running() && e.WebhookReady(ctx, w) })
		}
		wg.Wait()
		var now []string
		for i, w := range e.Webhooks {
			if ok[i] {
				now = append(now, hostPort(w.URL))
			}
		}
		mu.Lock()
		ready = now
		mu.Unlock()
	}
	pick := func(int) string {
		mu.Lock()
		defer mu.Unlock()
		if len(ready) == 0 {
			return "" // no endpoint: refused, as by a Service without ready Pods
		}
		return ready[next.Add(1)%uint64(len(ready))]
	}
	return newRouter([]string{"127.0.0.1:" + strconv.Itoa(port)}, poll, pick)
}
