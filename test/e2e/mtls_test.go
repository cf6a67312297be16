//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestMutualTLS: rota-extender's verbs answer only kube-scheduler. A pending
// GPU pod that no scheduler handles is the target: filter and bind for it
// without a client certificate, with a certificate from another CA (named
// like the scheduler, so only the signature differs) and over plain HTTP
// are all refused in the TLS handshake (or, plain, with 400), the pod stays
// unbound and the extender has no decision for it. The scheduler's own
// calls go through: a GPU pod is filtered and bound by the extender (its
// assignment annotation is the extender's bind), and a filter with the
// scheduler's certificate is answered. Health and metrics stay on the
// plain-HTTP ops listener.
func TestMutualTLS(t *testing.T) {
	const name = "mtls"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count = 2
	node := nodes(ctx, t, name, "mtls", 1, spec)[0].Spec.Name

	// The target: a GPU pod only an attacker's bind would place.
	target := pod(ns, "target", name).GPUs(1).Obj()
	target.Spec.SchedulerName = "no-such-scheduler"
	target = create(ctx, t, target)

	other, err := cluster.NewCA("rota-extender-clients")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.ClientCert("rota-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	tlsOf := env.ExtenderTLS
	noCert, err := tlsOf.VerbsClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, err := tlsOf.VerbsClient(&foreign)
	if err != nil {
		t.Fatal(err)
	}
	schedCert, err := tlsOf.VerbsClient(&tlsOf.SchedulerCert)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := json.Marshal(extenderv1.ExtenderArgs{Pod: target, NodeNames: &[]string{node}})
	if err != nil {
		t.Fatal(err)
	}
	bind, err := json.Marshal(extenderv1.ExtenderBindingArgs{PodName: target.Name, PodNamespace: ns,
		PodUID: target.UID, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	post := func(c *http.Client, url string, body []byte) (int, []byte, error) {
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		// A refusal may close the connection under the rest of the body.
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, nil
	}

	refused := 0
	for _, c := range []struct {
		who    string
		client *http.Client
		url    string
	}{
		{"no client certificate", noCert, env.VerbsURL},
		{"a certificate from another CA", foreignCert, env.VerbsURL},
		{"plain HTTP", http.DefaultClient, strings.Replace(env.VerbsURL, "https://", "http://", 1)},
	} {
		for verb, body := range map[string][]byte{"filter": filter, "bind": bind} {
			code, answer, err := post(c.client, c.url+"/"+verb, body)
			switch {
			case c.client == http.DefaultClient && err == nil && code == http.StatusBadRequest &&
				strings.Contains(string(answer), "HTTP request to an HTTPS server"):
				refused++ // Go's TLS server answers plain HTTP with this 400 and closes
			case c.client != http.DefaultClient && err != nil:
				// The server's alert ("certificate required", "unknown
				// certificate authority"); in TLS 1.3 the client may be
				// writing its request when the alert closes the connection,
				// and then sees a broken pipe instead. Either way there is no
				// answer, and the checks below show nothing reached the extender.
				refused++
				t.Logf("%s with %s: %v", verb, c.who, err)
			default:
				t.Errorf("%s with %s was not refused: %d %q %v", verb, c.who, code, answer, err)
			}
		}
	}
	// Nothing of it reached the extender: no decision, no binding.
	if msg, err := lastFilter(ctx, env.ExtenderURL+"/debug/pods/"+ns+"/target", "fit"); err == nil ||
		!strings.Contains(err.Error(), "404") {
		t.Errorf("the extender has a decision for the target after refused calls: %q %v", msg, err)
	}
	if p := getPod(ctx, t, ns, "target"); p.Spec.NodeName != "" {
		t.Fatalf("the target pod was bound to %s by an unauthenticated call", p.Spec.NodeName)
	}

	// The scheduler's own calls: a GPU pod is filtered and bound by the extender.
	create(ctx, t, pod(ns, "train", name).GPUs(1).Obj())
	pods := waitPods(ctx, t, ns, "the GPU pod running", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "train" {
				return harness.Running([]corev1.Pod{p}) == 1
			}
		}
		return false
	})
	for _, p := range pods {
		if p.Name == "train" {
			if a := assignment(t, &p); p.Spec.NodeName != node || len(a.GPUs) != 1 || a.Node != node {
				t.Errorf("train on %q with assignment %+v, want one GPU of %s", p.Spec.NodeName, a, node)
			}
		}
	}

	// The refusals were about the certificate: the same filter with the
	// scheduler's certificate is answered.
	code, answer, err := post(schedCert, env.VerbsURL+"/filter", filter)
	var res extenderv1.ExtenderFilterResult
	if err != nil || code != http.StatusOK || json.Unmarshal(answer, &res) != nil || res.Error != "" {
		t.Errorf("filter with the scheduler's certificate: %d %q %v", code, answer, err)
	}
	// Probes and Prometheus: plain HTTP, no certificate.
	for _, path := range []string{"/readyz", "/metrics"} {
		resp, err := http.Get(env.ExtenderURL + path)
		if err != nil {
			t.Fatalf("GET %s on the ops listener: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on the ops listener = %s", path, resp.Status)
		}
	}
	if p := getPod(ctx, t, ns, "target"); p.Spec.NodeName != "" {
		t.Errorf("the target pod was bound to %s", p.Spec.NodeName)
	}
	note(name, "%d unauthenticated filter/bind calls refused; the scheduler's own bound its pod", refused)
}
