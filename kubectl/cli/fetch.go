package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/pkg/podreq"
)

// pageSize bounds one list call; lists are paged with continue tokens.
const pageSize = 500

// fetcher reads what a report needs from the API server.
type fetcher struct {
	cs   kubernetes.Interface
	o    options
	warn io.Writer
}

// need says which optional lists a command reads (nodes and pods always).
type need struct {
	namespaces bool
	quota      bool
	// podEvents lists the pod events of this namespace ("" none).
	podEvents string
	// createEvents lists controllers' FailedCreate events in all namespaces.
	createEvents bool
	// jobs lists the Jobs of all namespaces (the Jobs queued suspended).
	jobs bool
}

// jobSets lists the JobSets of all namespaces (none when the JobSet API is
// not served), read from their JSON: kubectl-rota does not import JobSet.
func (f *fetcher) jobSets(ctx context.Context) ([]podreq.JobSet, error) {
	rc := f.cs.Discovery().RESTClient()
	if rc == nil {
		return nil, nil
	}
	raw, err := rc.Get().AbsPath("/apis/" + podreq.JobSetGroup + "/v1alpha2/jobsets").DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []podreq.JobSet `json:"items"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("reading the JobSets: %w", err)
	}
	return l.Items, nil
}

// input lists what the report needs. Nodes and pods are required; without
// namespaces, events or the quota ConfigMap the report degrades and the
// reason is printed to stderr.
func (f *fetcher) input(ctx context.Context, n need) (report.Input, error) {
	var in report.Input
	var err error
	core := f.cs.CoreV1()
	if in.Nodes, err = list(ctx, func(o metav1.ListOptions) ([]corev1.Node, string, error) {
		l, err := core.Nodes().List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	}, metav1.ListOptions{}); err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	// All namespaces: quota counts every team's pods, and the ledger every
	// pod on every node.
	if in.Pods, err = list(ctx, func(o metav1.ListOptions) ([]corev1.Pod, string, error) {
		l, err := core.Pods("").List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	}, metav1.ListOptions{}); err != nil {
		return in, fmt.Errorf("list pods in all namespaces: %w", err)
	}
	if n.jobs {
		if in.Jobs, err = list(ctx, func(o metav1.ListOptions) ([]batchv1.Job, string, error) {
			l, err := f.cs.BatchV1().Jobs("").List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		}, metav1.ListOptions{}); err != nil {
			fmt.Fprintf(f.warn, "warning: list Jobs: %v; Jobs queued suspended are not listed\n", err)
		}
		if in.JobSets, err = f.jobSets(ctx); err != nil {
			fmt.Fprintf(f.warn, "warning: list JobSets: %v; JobSets queued suspended are not listed\n", err)
		}
	}
	// DRA: nodes whose GPUs a DRA driver publishes take no GPU work from
	// Rota. A cluster that does not serve resource.k8s.io/v1 has none.
	if in.ResourceSlices, err = list(ctx, func(o metav1.ListOptions) ([]resourcev1.ResourceSlice, string, error) {
		l, err := f.cs.ResourceV1().ResourceSlices().List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(f.warn, "warning: list ResourceSlices: %v; nodes whose GPUs DRA manages are not told apart\n", err)
	}
	if len(in.ResourceSlices) > 0 {
		l, err := f.cs.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(f.warn, "warning: list DeviceClasses: %v\n", err)
		} else {
			in.DeviceClasses = l.Items
		}
	}
	if n.namespaces {
		l, err := core.Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(f.warn, "warning: list namespaces: %v; teams come from pod labels only\n", err)
		} else {
			in.Namespaces = l.Items
		}
	}
	if n.quota {
		cm, err := core.ConfigMaps(f.o.rotaNamespace).Get(ctx, f.o.quotaCM, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			in.QuotaError = fmt.Sprintf("cannot read ConfigMap %s/%s: %v", f.o.rotaNamespace, f.o.quotaCM, err)
		default:
			in.Quota = cm
		}
	}
	evs := func(ns string, sel fields.Selector) {
		got, err := list(ctx, func(o metav1.ListOptions) ([]corev1.Event, string, error) {
			l, err := core.Events(ns).List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		}, metav1.ListOptions{FieldSelector: sel.String()})
		if err != nil {
			fmt.Fprintf(f.warn, "warning: list events: %v\n", err)
			return
		}
		in.Events = append(in.Events, got...)
	}
	if n.podEvents != "" {
		evs(n.podEvents, fields.OneTermEqualSelector("involvedObject.kind", "Pod"))
	}
	if n.createEvents {
		evs("", fields.OneTermEqualSelector("reason", report.ReasonFailedCreate))
	}
	return in, nil
}

// list pages through a list call.
func list[T any](ctx context.Context, call func(metav1.ListOptions) ([]T, string, error), o metav1.ListOptions) ([]T, error) {
	o.Limit = pageSize
	var out []T
	for {
		items, cont, err := call(o)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if cont == "" || ctx.Err() != nil {
			return out, ctx.Err()
		}
		o.Continue = cont
	}
}

// fetchExtender reads the extender's decision log for a pod. Failures are
// reported in the result, not as errors: the rest of the report stands.
func fetchExtender(ctx context.Context, hc *http.Client, base, ns, name string) *report.ExtenderLog {
	u := strings.TrimSuffix(base, "/") + "/debug/pods/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	out := &report.ExtenderLog{URL: u}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	resp, err := hc.Do(req)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		out.Error = "read the answer: " + err.Error()
		return out
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		out.Error = "the extender keeps no recent decision for this pod (it keeps the latest pods for a while; is this the leader replica?)"
		return out
	default:
		out.Error = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		return out
	}
	var doc struct {
		Decisions []report.ExtenderDecision `json:"decisions"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		out.Error = "the answer is not the extender's /debug/pods JSON: " + err.Error()
		return out
	}
	out.Decisions = doc.Decisions
	return out
}

// fetchQueue reads the queue controller's live view (GET /debug/queue).
func fetchQueue(ctx context.Context, hc *http.Client, base, team string) (report.LiveQueue, error) {
	var v report.LiveQueue
	u := strings.TrimSuffix(base, "/") + "/debug/queue"
	if team != "" {
		u += "?team=" + url.QueryEscape(team)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return v, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return v, fmt.Errorf("read the queue from %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return v, fmt.Errorf("read the queue from %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("read the queue from %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("the answer of %s is not the queue's JSON: %w", u, err)
	}
	if !v.Leader {
		return v, fmt.Errorf("%s is the standby replica, whose queue controller does not run: port-forward to the leader (the pod labelled <domain>/extender-leader=true)", base)
	}
	return v, nil
}
