//go:build e2e

package chart

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/admission/webhook"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/cluster"
)

// webhookConfigs returns the rendered webhook configurations.
func webhookConfigs(t *testing.T, sets []string) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range decode(t, render(t, sets)) {
		var target any
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			target = v
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			target = m
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, target); err != nil {
			t.Fatal(err)
		}
	}
	if v == nil || m == nil || len(v.Webhooks) != 1 || len(m.Webhooks) != 3 {
		t.Fatalf("%v: want one validating and three mutating webhooks (pods, Jobs, JobSets), got %v and %v", sets, v, m)
	}
	return v, m
}

func conditions(mcs []admissionregistrationv1.MatchCondition) string {
	var b strings.Builder
	for _, c := range mcs {
		b.WriteString(c.Name + ": " + c.Expression + "\n")
	}
	return b.String()
}

// TestChartWebhooks checks the rendered webhook configurations: the
// mutating one for pods CREATE on /mutate with failurePolicy Fail, sent
// from every namespace; the mutating ones for Jobs and JobSets CREATE, sent
// only from namespaces that queue Jobs suspended; the validating one for CREATE and UPDATE,
// its UPDATEs narrowed to a gated old pod or a change of the quota keys;
// every name in the CEL follows the domain value; cert-manager injects both
// CA bundles; rota-admission is told who the queue controller is.
func TestChartWebhooks(t *testing.T) {
	for _, tc := range []struct {
		sets       []string
		domain     string
		wantUsers  string
		suspendAll bool
	}{
		{sets: nil, domain: "example.com", wantUsers: "system:serviceaccount:rota-system:rota-extender"},
		{sets: []string{"admission.suspendJobs=all"}, domain: "example.com", wantUsers: "system:serviceaccount:rota-system:rota-extender", suspendAll: true},
		{sets: []string{"domain=gpu.acme.io", "admission.certManager.enabled=true", "admission.queueControllerUsers={system:serviceaccount:q:queue,ops}"},
			domain: "gpu.acme.io", wantUsers: "system:serviceaccount:q:queue,ops"},
	} {
		t.Run(tc.domain, func(t *testing.T) {
			v, m := webhookConfigs(t, tc.sets)
			mw, vw := m.Webhooks[0], v.Webhooks[0]
			if mw.ClientConfig.Service == nil || *mw.ClientConfig.Service.Path != "/mutate" ||
				vw.ClientConfig.Service == nil || *vw.ClientConfig.Service.Path != "/validate" {
				t.Errorf("paths: mutating %+v, validating %+v", mw.ClientConfig.Service, vw.ClientConfig.Service)
			}
			if len(mw.Rules) != 1 || !slices.Equal(mw.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
				!slices.Equal(mw.Rules[0].Resources, []string{"pods"}) {
				t.Errorf("mutating rules %+v, want pods CREATE", mw.Rules)
			}
			if len(vw.Rules) != 1 || !slices.Equal(vw.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
				t.Errorf("validating rules %+v, want pods CREATE and UPDATE", vw.Rules)
			}
			if mw.FailurePolicy == nil || *mw.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("mutating failurePolicy %v, want Fail", mw.FailurePolicy)
			}
			if mw.ReinvocationPolicy == nil || *mw.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
				t.Errorf("mutating reinvocationPolicy %v, want IfNeeded", mw.ReinvocationPolicy)
			}
			// Every namespace is sent: where queueing is off or Kueue's the
			// webhook adds no gate but still names the gangs of workloads.
			if slices.ContainsFunc(mw.NamespaceSelector.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
				return r.Key == tc.domain+"/queueing"
			}) {
				t.Errorf("mutating namespaceSelector %+v skips namespaces by %s/queueing; the webhook names gangs there", mw.NamespaceSelector, tc.domain)
			}
			mc, vc := conditions(mw.MatchConditions), conditions(vw.MatchConditions)
			for _, want := range []string{"'" + tc.domain + "/'", "'" + tc.domain + "/queue'"} {
				if !strings.Contains(mc, want) || !strings.Contains(vc, want) {
					t.Errorf("matchConditions lack %s:\nmutating:\n%svalidating:\n%s", want, mc, vc)
				}
			}
			for _, want := range []string{"request.operation != 'UPDATE'", "oldObject.spec.schedulingGates", tc.domain + "/gang-size", tc.domain + "/team"} {
				if !strings.Contains(vc, want) {
					t.Errorf("validating matchConditions lack %q:\n%s", want, vc)
				}
			}
			if tc.domain != "example.com" && (strings.Contains(mc, "example.com") || strings.Contains(vc, "example.com")) {
				t.Errorf("matchConditions name example.com with domain %s:\n%s%s", tc.domain, mc, vc)
			}
			certManager := slices.Contains(tc.sets, "admission.certManager.enabled=true")
			for kind, ann := range map[string]map[string]string{"mutating": m.Annotations, "validating": v.Annotations} {
				if _, ok := ann["cert-manager.io/inject-ca-from"]; ok != certManager {
					t.Errorf("%s: cert-manager CA injection %v, want %v", kind, ok, certManager)
				}
			}
			if !certManager && (len(mw.ClientConfig.CABundle) == 0 || string(mw.ClientConfig.CABundle) != string(vw.ClientConfig.CABundle)) {
				t.Errorf("the webhooks' CA bundles differ or are empty")
			}
			// The Jobs and JobSets webhooks: CREATE, only in namespaces
			// that queue Jobs suspended, only top-level ones asking for the
			// domain's resources in their pod templates.
			optOut := metav1.LabelSelectorRequirement{Key: tc.domain + "/queueing", Operator: metav1.LabelSelectorOpNotIn,
				Values: []string{contract.QueueingGate, contract.QueueingOff, contract.QueueingKueue}}
			for i, want := range []struct{ group, resource, template string }{
				{"batch", "jobs", "object.spec.template.spec.containers"},
				{"jobset.x-k8s.io", "jobsets", "object.spec.replicatedJobs.exists(r, r.template.spec.template.spec.containers"},
			} {
				jw := m.Webhooks[1+i]
				if len(jw.Rules) != 1 || !slices.Equal(jw.Rules[0].Resources, []string{want.resource}) || !slices.Equal(jw.Rules[0].APIGroups, []string{want.group}) ||
					!slices.Equal(jw.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
					t.Errorf("%s webhook rules %+v, want %s %s CREATE", want.resource, jw.Rules, want.group, want.resource)
				}
				switch {
				case jw.NamespaceSelector == nil:
					t.Errorf("%s webhook has no namespaceSelector", want.resource)
				case tc.suspendAll && (len(jw.NamespaceSelector.MatchLabels) != 0 ||
					!slices.ContainsFunc(jw.NamespaceSelector.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
						return r.Key == optOut.Key && r.Operator == optOut.Operator && slices.Equal(r.Values, optOut.Values)
					})):
					t.Errorf("%s webhook namespaceSelector %+v, want every namespace but %v", want.resource, jw.NamespaceSelector, optOut)
				case !tc.suspendAll && jw.NamespaceSelector.MatchLabels[tc.domain+"/queueing"] != contract.QueueingSuspend:
					t.Errorf("%s webhook namespaceSelector %+v, want %s/queueing=%s", want.resource, jw.NamespaceSelector, tc.domain, contract.QueueingSuspend)
				}
				if jc := conditions(jw.MatchConditions); !strings.Contains(jc, want.template) ||
					!strings.Contains(jc, "'"+tc.domain+"/'") || !strings.Contains(jc, "ownerReferences") {
					t.Errorf("%s webhook matchConditions:\n%s\nwant the templates' resources and top-level objects only", want.resource, jc)
				}
			}
			want := "--suspend-jobs=labelled"
			if tc.suspendAll {
				want = "--suspend-jobs=all"
			}
			if args := admissionArgs(t, tc.sets); !slices.Contains(args, want) {
				t.Errorf("rota-admission args %q lack %s", args, want)
			}
			if args := admissionArgs(t, tc.sets); !slices.Contains(args, "--queue-controller-users="+tc.wantUsers) {
				t.Errorf("rota-admission args %q lack --queue-controller-users=%s", args, tc.wantUsers)
			}
		})
	}
}

func admissionArgs(t *testing.T, sets []string) []string {
	t.Helper()
	for _, o := range decode(t, render(t, sets)) {
		if o.GetKind() == "Deployment" && o.GetName() == "rota-admission" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			var out []string
			for _, a := range cs[0].(map[string]any)["args"].([]any) {
				out = append(out, a.(string))
			}
			return out
		}
	}
	t.Fatal("no rota-admission Deployment")
	return nil
}

// recorder counts the reviews the API server sends, by path, operation and
// pod, and answers them with rota-admission's handlers.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int // "/mutate CREATE ns/name"
	mux  *http.ServeMux
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if review, err := webhook.DecodeReview(body); err == nil {
		r.mu.Lock()
		r.seen[fmt.Sprintf("%s %s %s/%s", req.URL.Path, review.Request.Operation, review.Request.Namespace, review.Request.Name)]++
		r.mu.Unlock()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mux.ServeHTTP(w, req)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

type nsGetter struct{ c kubernetes.Interface }

func (g nsGetter) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return g.c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}

// TestChartWebhooksOnRealAPIServer installs the chart's two webhook
// configurations in a real kube-apiserver, pointed at rota-admission's
// handlers in this process, and checks which requests the API server
// sends (rules, namespaceSelector and matchConditions as the API server
// evaluates them) and what it stores.
func TestChartWebhooksOnRealAPIServer(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{NoScheduler: true, NoPodSimulator: true, NodeLeaseInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := c.Client()
	names := contract.Default

	vw := view.New(view.Options{Names: names})
	vw.SetConfig(quota.Config{UnknownTeams: quota.UnlimitedUnknown})
	const controller = "queue-controller"
	o := webhook.Options{Names: names, View: vw, Namespaces: nsGetter{client}, QueueControllers: []string{controller}}
	mux := http.NewServeMux()
	mux.Handle("/validate", webhook.New(o))
	mux.Handle("/mutate", webhook.NewMutating(o))
	rec := &recorder{seen: map[string]int{}, mux: mux}
	srv := httptest.NewTLSServer(rec)
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	// The queue controller's own updates skip the webhook (matchConditions
	// name the users rota-admission lets remove the gate).
	v, m := webhookConfigs(t, []string{"admission.queueControllerUsers={" + controller + "}"})
	for i := range v.Webhooks {
		url := srv.URL + *v.Webhooks[i].ClientConfig.Service.Path
		v.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
	}
	for i := range m.Webhooks {
		url := srv.URL + *m.Webhooks[i].ClientConfig.Service.Path
		m.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
	}
	v.ObjectMeta, m.ObjectMeta = metav1.ObjectMeta{Name: v.Name}, metav1.ObjectMeta{Name: m.Name}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the chart's ValidatingWebhookConfiguration: %v", err)
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the chart's MutatingWebhookConfiguration: %v", err)
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{names.TeamLabel: "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "off", Labels: map[string]string{names.TeamLabel: "a", names.QueueingLabel: contract.QueueingOff}}},
	} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpuPod := func(ns, name string, init bool) *corev1.Pod {
		q := resource.MustParse("1")
		res := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(names.GPU): q},
			Requests: corev1.ResourceList{corev1.ResourceName(names.GPU): q}}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "train"}}}}
		if init {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "prep", Resources: res}}
		} else {
			p.Spec.Containers[0].Resources = res
		}
		return p
	}
	// The API server takes up new configurations asynchronously.
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := client.CoreV1().Pods("team").Create(ctx, gpuPod("team", "probe", false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && len(p.Spec.SchedulingGates) == 1 && rec.count("/validate CREATE team/probe") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not call the chart's webhooks (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	create := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s/%s: %v", p.Namespace, p.Name, err)
		}
		return got
	}
	patch := func(ns, name, body string, pt types.PatchType) error {
		_, err := client.CoreV1().Pods(ns).Patch(ctx, name, pt, []byte(body), metav1.PatchOptions{})
		return err
	}
	gated := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == names.QueueGate })
	}
	want := func(key string, n int) {
		t.Helper()
		if got := rec.count(key); got != n {
			t.Errorf("%s: sent %d times, want %d", key, got, n)
		}
	}

	// A refused update may be sent more than once: the API server runs an
	// update's admission against its cached object first, and when that
	// fails against a cache behind etcd it reads etcd and runs it again
	// (storage GuaranteedUpdate). Refused updates are counted at least.
	atLeast := func(key string, n int) {
		t.Helper()
		if got := rec.count(key); got < n {
			t.Errorf("%s: sent %d times, want at least %d", key, got, n)
		}
	}

	cpu := create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "web"}}}})
	want("/mutate CREATE team/web", 0)
	want("/validate CREATE team/web", 0)
	if len(cpu.Spec.SchedulingGates) != 0 {
		t.Errorf("CPU-only pod stored with gates %v", cpu.Spec.SchedulingGates)
	}

	g := create(gpuPod("team", "g", false))
	want("/mutate CREATE team/g", 1)
	want("/validate CREATE team/g", 1)
	if !gated(g) {
		t.Errorf("GPU pod stored with gates %v, want %s", g.Spec.SchedulingGates, names.QueueGate)
	}
	if i := create(gpuPod("team", "init", true)); !gated(i) {
		t.Errorf("pod with a GPU init container stored with gates %v", i.Spec.SchedulingGates)
	}
	// Any update of a gated pod is sent; removing the gate by hand is refused.
	if err := patch("team", "g", `{"metadata":{"annotations":{"note":"x"}}}`, types.MergePatchType); err != nil {
		t.Fatalf("annotating the gated pod: %v", err)
	}
	want("/validate UPDATE team/g", 1)
	err := patch("team", "g", `[{"op":"remove","path":"/spec/schedulingGates"}]`, types.JSONPatchType)
	if err == nil || !strings.Contains(err.Error(), "only Rota's queue controller may remove scheduling gate") {
		t.Errorf("removing the gate by hand: %v", err)
	}
	atLeast("/validate UPDATE team/g", 2)
	// The queue controller admits a pod: its update is not sent (the
	// webhook would allow it), so an admission costs no webhook call.
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controller, Groups: []string{"system:masters"}}
	asController, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asController.CoreV1().Pods("team").Patch(ctx, "init", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the queue controller removing the gate: %v", err)
	}
	want("/validate UPDATE team/init", 0)

	// Queueing off: sent to the mutating webhook (which names gangs there)
	// but not gated; updates sent only when a quota key changes.
	off := create(gpuPod("off", "o", false))
	want("/mutate CREATE off/o", 1)
	want("/validate CREATE off/o", 1)
	if gated(off) {
		t.Errorf("pod of a queueing-off namespace stored with gates %v", off.Spec.SchedulingGates)
	}
	for i, body := range []string{`{"metadata":{"annotations":{"note":"x"}}}`, `{"metadata":{"labels":{"app":"y"}}}`,
		`{"metadata":{"annotations":{"` + names.AssignmentAnnotation + `":"{}"}}}`} {
		if err := patch("off", "o", body, types.MergePatchType); err != nil {
			t.Fatalf("update %d of the ungated pod: %v", i, err)
		}
	}
	want("/validate UPDATE off/o", 0)
	err = patch("off", "o", `{"metadata":{"labels":{"`+names.TeamLabel+`":"b"}}}`, types.MergePatchType)
	if err == nil || !strings.Contains(err.Error(), "cannot change on an existing GPU pod") {
		t.Errorf("changing the team label: %v", err)
	}
	err = patch("off", "o", `{"metadata":{"annotations":{"`+names.GangSizeAnnotation+`":"4"}}}`, types.MergePatchType)
	if err == nil || !strings.Contains(err.Error(), "cannot change on an existing GPU pod") {
		t.Errorf("adding a gang size: %v", err)
	}
	atLeast("/validate UPDATE off/o", 2)

	// Jobs: sent only from a namespace that queues Jobs suspended, and
	// stored suspended and marked there.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "susp",
		Labels: map[string]string{names.TeamLabel: "a", names.QueueingLabel: contract.QueueingSuspend}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := func(ns string) *batchv1.Job {
		tmpl := gpuPod(ns, "", false)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	}
	plain, err := client.BatchV1().Jobs("team").Create(ctx, job("team"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want("/mutate CREATE team/train", 0)
	queued, err := client.BatchV1().Jobs("susp").Create(ctx, job("susp"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want("/mutate CREATE susp/train", 1)
	if podreq.Suspended(plain) || !podreq.Suspended(queued) || !podreq.QueuedJob(queued, names) || podreq.QueuedJob(plain, names) {
		t.Errorf("Jobs stored: in team suspend %v, marked %v; in susp suspend %v, marked %v; want only susp's suspended and marked",
			plain.Spec.Suspend, podreq.QueuedJob(plain, names), queued.Spec.Suspend, podreq.QueuedJob(queued, names))
	}
	t.Logf("reviews sent: %v", rec.seen)
}
