package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/test/cluster"
)

// Leader election as the chart renders it (release "rota"): the Lease and
// the replicas' Pods are in SystemNamespace.
const (
	ExtenderLease = "rota-extender"
	// ExtenderPodPrefix names the Pod objects that stand for the
	// rota-extender processes: rota-extender-0, rota-extender-1.
	ExtenderPodPrefix = "rota-extender-"
)

// Replica is one rota-extender process. Its Pod is an API object only (no
// kubelet runs it; it stays Pending): the process labels it while it leads,
// as in the chart, and its leader-election identity starts with the Pod's
// name.
type Replica struct {
	*Process
	Pod string
	// VerbsURL and OpsURL are this process's own listeners.
	VerbsURL, OpsURL string
}

// Identity reports whether a leader-election identity is this replica's.
func (r *Replica) Identity(id string) bool { return strings.HasPrefix(id, r.Pod+"_") }

// Signal sends sig to the replica's process group (SIGSTOP, SIGCONT).
func (r *Replica) Signal(sig syscall.Signal) error { return SignalGroup(r.Process, sig) }

// SignalGroup sends sig to a running process's group.
func SignalGroup(p *Process, sig syscall.Signal) error {
	pid := p.PID()
	if pid == 0 || !p.Running() {
		return fmt.Errorf("%s (log %s) is not running", p.Name, p.LogPath)
	}
	return syscall.Kill(-pid, sig)
}

// Leading reports whether the replica says it leads and serves the verbs
// (rota_extender_leading on its ops listener).
func (r *Replica) Leading(ctx context.Context) (bool, error) {
	s, err := Scrape(ctx, r.OpsURL+"/metrics")
	if err != nil {
		return false, err
	}
	return s.Sum("rota_extender_leading") == 1, nil
}

// extenderArgs are the flags every replica gets besides its listeners: the
// chart's Lease and the replica's own Pod.
func extenderArgs(pod string) []string {
	return []string{
		"--leader-elect-resource-namespace=" + SystemNamespace,
		"--leader-elect-resource-name=" + ExtenderLease,
		"--pod-name=" + pod,
		"--pod-namespace=" + SystemNamespace,
		// kube-scheduler's only profile (the configuration names none).
		"--scheduler-names=" + corev1.DefaultSchedulerName,
	}
}

// createExtenderPod creates (or keeps) the Pod object a replica labels.
// Nothing schedules it (its schedulerName is no scheduler's).
func createExtenderPod(ctx context.Context, client kubernetes.Interface, name string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SystemNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "rota", "app.kubernetes.io/component": "extender"}},
		Spec: corev1.PodSpec{SchedulerName: "rota-harness-no-scheduler",
			Containers: []corev1.Container{{Name: "extender", Image: "rota-extender"}}},
	}
	_, err := client.CoreV1().Pods(SystemNamespace).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// LeaseHolder returns the holder identity of the extenders' Lease ("" when
// there is none).
func (e *Env) LeaseHolder(ctx context.Context) (string, error) {
	l, err := e.Client.CoordinationV1().Leases(SystemNamespace).Get(ctx, ExtenderLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// Leader returns the replica that holds the Lease, or nil.
func (e *Env) Leader(ctx context.Context) (*Replica, error) {
	id, err := e.LeaseHolder(ctx)
	if err != nil || id == "" {
		return nil, err
	}
	for _, r := range e.Extenders {
		if r.Identity(id) {
			return r, nil
		}
	}
	return nil, nil
}

// WaitLeading waits until r holds the Lease and says it serves the verbs.
func (e *Env) WaitLeading(ctx context.Context, r *Replica) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		ok, err := r.Leading(ctx)
		if err == nil && ok {
			return nil
		}
		last = err
		select {
		case <-r.Exited():
			return fmt.Errorf("%s exited: %w", r.Pod, r.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("%s does not lead: %w (last: %w)\n%s", r.Pod, ctx.Err(), last, r.LogTail(30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Router is the harness's stand-in for the chart's extender Service, which
// selects the Pod labelled as the leader: a TCP proxy that sends each new
// connection to the replica holding the Lease (read every 50 ms), TLS and
// all passing through. Like kube-proxy, it leaves open connections where
// they are; when the replica dies they break, and the scheduler's next
// connection goes to the holder. What it leaves out: it follows the Lease,
// not the label (the scenarios check the label apart), nor readiness; and
// a cluster's endpoint updates (EndpointSlice, then kube-proxy) add about a
// second after the label changes, which the harness does not have.
type Router struct {
	lns   []net.Listener
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// startRouter listens on each address of listen and forwards to the same
// listener (by index in addrs) of the Lease holder.
func (e *Env) startRouter(listen []string, addrs func(*Replica) []string) (*Router, error) {
	var backend atomic.Pointer[Replica]
	return newRouter(listen, func(ctx context.Context) {
		if r, err := e.Leader(ctx); err == nil {
			backend.Store(r)
		}
	}, func(i int) string {
		if r := backend.Load(); r != nil {
			return addrs(r)[i]
		}
		return ""
	})
}

// listenRetrying listens on a, trying again for 3 s while the port is
// taken: test packages run side by side, and another one's cluster.FreePorts
// probe may hold the port for a moment.
func listenRetrying(a string) (net.Listener, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		ln, err := net.Listen("tcp", a)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newRouter listens on each address of listen and sends each connection
// accepted on listener i to pick(i) ("" refuses it); poll runs every 50 ms
// to follow the backends.
func newRouter(listen []string, poll func(context.Context), pick func(i int) string) (*Router, error) {
	ctx, cancel := context.WithCancel(context.Background())
	rt := &Router{stop: cancel, conns: map[net.Conn]struct{}{}}
	for _, a := range listen {
		ln, err := listenRetrying(a)
		if err != nil {
			rt.Close()
			return nil, err
		}
		rt.lns = append(rt.lns, ln)
	}
	rt.wg.Go(func() {
		for ctx.Err() == nil {
			poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	for i, ln := range rt.lns {
		rt.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				rt.wg.Go(func() { rt.forward(c, func() string { return pick(i) }) })
			}
		})
	}
	return rt, nil
}

func (rt *Router) track(c net.Conn, on bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if on {
		rt.conns[c] = struct{}{}
	} else {
		delete(rt.conns, c)
	}
}

// forward pipes c to the backend's address until either side closes.
func (rt *Router) forward(c net.Conn, addr func() string) {
	defer c.Close()
	a := addr()
	if a == "" {
		return // no holder: as a Service without endpoints, refused
	}
	b, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return
	}
	defer b.Close()
	rt.track(c, true)
	rt.track(b, true)
	defer rt.track(c, false)
	defer rt.track(b, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
}

// Close stops listening and breaks every forwarded connection.
func (rt *Router) Close() error {
	rt.stop()
	for _, ln := range rt.lns {
		_ = ln.Close()
	}
	rt.mu.Lock()
	for c := range rt.conns {
		_ = c.Close()
	}
	rt.mu.Unlock()
	rt.wg.Wait()
	return nil
}

// startExtenders creates the replicas' Pods and processes and starts them:
// one replica on the verbs and ops ports, or two on ports of their own
// behind a Router on the verbs and ops ports. It returns once the first
// replica leads and every one is ready.
func (e *Env) startExtenders(ctx context.Context, verbsPort, opsPort int) error {
	n := max(e.opts.Extenders, 1)
	if n > 2 {
		return fmt.Errorf("Options.Extenders: %d replicas; the harness runs one or two", n)
	}
	ports := []int{verbsPort, opsPort}
	if n > 1 {
		var err error
		if ports, err = cluster.FreePorts(2 * n); err != nil {
			return err
		}
	}
	for i := range n {
		pod := ExtenderPodPrefix + strconv.Itoa(i)
		if err := createExtenderPod(ctx, e.Client, pod); err != nil {
			return fmt.Errorf("extender pod %s: %w", pod, err)
		}
		verbs, ops := ports[2*i], ports[2*i+1]
		logName := "rota-extender"
		if n > 1 {
			logName = pod
		}
		args := append([]string{
			"--kubeconfig=" + e.kubeconfs["rota-extender"],
			"--listen=127.0.0.1:" + strconv.Itoa(verbs),
			"--ops-listen=127.0.0.1:" + strconv.Itoa(ops),
			"--v=2",
			"--memory-unit-mib=" + strconv.FormatInt(int64(e.unitMiB), 10),
			"--records-key-file=" + e.recordsKeyFile,
			"--records-signed-since=" + e.recordsSince.UTC().Format(time.RFC3339),
		}, extenderArgs(pod)...)
		if e.opts.Profiling {
			args = append(args, "--profiling")
		}
		args = append(append(args, e.ExtenderTLS.Args()...), e.opts.ExtenderArgs...)
		e.Extenders = append(e.Extenders, &Replica{Process: newProcess(e.binDir, "rota-extender", logName, e.Dir, args),
			Pod: pod, VerbsURL: "https://127.0.0.1:" + strconv.Itoa(verbs), OpsURL: "http://127.0.0.1:" + strconv.Itoa(ops)})
	}
	e.Extender = e.Extenders[0].Process
	if n > 1 {
		rt, err := e.startRouter([]string{"127.0.0.1:" + strconv.Itoa(verbsPort), "127.0.0.1:" + strconv.Itoa(opsPort)},
			func(r *Replica) []string { return []string{hostPort(r.VerbsURL), hostPort(r.OpsURL)} })
		if err != nil {
			return fmt.Errorf("routing stand-in: %w", err)
		}
		e.Router = rt
	}
	if err := e.StartExtender(ctx); err != nil {
		return err
	}
	for _, r := range e.Extenders[1:] {
		if err := e.StartReplica(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// StartReplica starts a replica (again) and waits for its /readyz: its
// ledger is rebuilt, whether it leads or stands by.
func (e *Env) StartReplica(ctx context.Context, r *Replica) error {
	if err := r.Start(); err != nil {
		return err
	}
	return waitHTTP(ctx, r.Process, r.OpsURL+"/readyz", &http.Client{Timeout: 2 * time.Second})
}

func hostPort(url string) string { return url[strings.Index(url, "://")+3:] }

// extenderProcesses are the replicas' processes.
func (e *Env) extenderProcesses() []*Process {
	var out []*Process
	for _, r := range e.Extenders {
		out = append(out, r.Process)
	}
	return out
}
