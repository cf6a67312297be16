package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/pkg/contract"
)

// ChartWebhooks are the admission configurations of Rota's manifests: the
// validating webhook and the mutating one (the queue gate), and the
// records policies (pods' records, Jobs' records) with their bindings, in
// the same order (none when the manifests have none).
type ChartWebhooks struct {
	Validating     *admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating       *admissionregistrationv1.MutatingWebhookConfiguration
	Policies       []*admissionregistrationv1.ValidatingAdmissionPolicy
	PolicyBindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// LoadChartWebhooks reads the webhook configurations from a multi-document
// YAML file such as deploy/rota.yaml.
func LoadChartWebhooks(path string) (*ChartWebhooks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	w := &ChartWebhooks{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var target any
		switch u.GetKind() {
		case "ValidatingWebhookConfiguration":
			w.Validating = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			target = w.Validating
		case "MutatingWebhookConfiguration":
			w.Mutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
			target = w.Mutating
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			w.Policies = append(w.Policies, p)
			target = p
		case "ValidatingAdmissionPolicyBinding":
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			w.PolicyBindings = append(w.PolicyBindings, b)
			target = b
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, target); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
	if w.Validating == nil || w.Mutating == nil {
		return nil, fmt.Errorf("%s lacks the ValidatingWebhookConfiguration or the MutatingWebhookConfiguration", path)
	}
	if len(w.Policies) != len(w.PolicyBindings) {
		return nil, fmt.Errorf("%s has a ValidatingAdmissionPolicy without its binding, or a binding without its policy", path)
	}
	return w, nil
}

// local points a chart webhook's client configuration at the local
// rota-admission (the chart's service path on baseURL) and gives it the
// harness's CA and a 10 s timeout (a loaded test machine is slower than a
// cluster); rules, selectors, matchConditions and failure policy stay the
// chart's.
func local(cc admissionregistrationv1.WebhookClientConfig, baseURL string, ca []byte) (admissionregistrationv1.WebhookClientConfig, *int32) {
	path := "/validate"
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := baseURL + path
	timeout := int32(10)
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}, &timeout
}

// chartWebhooks loads the manifests' webhook configurations, named
// WebhookName and pointed at this Env's rota-admission.
func (e *Env) chartWebhooks() (*ChartWebhooks, error) {
	path, err := e.manifestsPath()
	if err != nil {
		return nil, err
	}
	w, err := LoadChartWebhooks(path)
	if err != nil {
		return nil, err
	}
	w.Validating.ObjectMeta = metav1.ObjectMeta{Name: WebhookName}
	for i := range w.Validating.Webhooks {
		h := &w.Validating.Webhooks[i]
		h.ClientConfig, h.TimeoutSeconds = local(h.ClientConfig, e.AdmissionURL, e.admCA)
	}
	w.Mutating.ObjectMeta = metav1.ObjectMeta{Name: WebhookName}
	for i := range w.Mutating.Webhooks {
		h := &w.Mutating.Webhooks[i]
		h.ClientConfig, h.TimeoutSeconds = local(h.ClientConfig, e.AdmissionURL, e.admCA)
	}
	return w, nil
}

// QueueingOn reports whether the mutating webhook (the queue gate) is
// installed.
func (e *Env) QueueingOn(ctx context.Context) (bool, error) {
	_, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// SetQueueing installs (on) or removes the chart's mutating webhook and
// waits until the API server applies the change: a GPU pod created in the
// default namespace comes back with the queue gate, or without it. It
// returns whether queueing was on before, so a scenario can restore it.
// Queueing on needs a quota under which a GPU pod of the (unlabelled)
// default namespace is accepted, such as unknownTeams: unlimited.
func (e *Env) SetQueueing(ctx context.Context, on bool) (was bool, err error) {
	was, err = e.QueueingOn(ctx)
	if err != nil || was == on {
		return was, err
	}
	api := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if on {
		w, err := e.chartWebhooks()
		if err != nil {
			return was, err
		}
		if _, err := api.Create(ctx, w.Mutating, metav1.CreateOptions{}); err != nil {
			return was, fmt.Errorf("registering the mutating webhook: %w", err)
		}
	} else if err := api.Delete(ctx, WebhookName, metav1.DeleteOptions{}); err != nil {
		return was, err
	}
	return was, e.waitQueueGate(ctx, metav1.NamespaceDefault, on)
}

// waitQueueGate creates (dry-run) a pod that asks for 0 GPUs (it names
// Rota's resource, so the webhooks treat it as a GPU pod, and fits any
// quota) in namespace until it comes back with the queue gate (want) or
// without it.
func (e *Env) waitQueueGate(ctx context.Context, namespace string, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	zero := mustQuantity("0")
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rota-queue-probe", Namespace: namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceName(e.Names.GPU): zero},
				Requests: corev1.ResourceList{corev1.ResourceName(e.Names.GPU): zero}}}}},
	}
	for {
		p, err := e.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && HasQueueGate(p, e.Names.QueueGate) == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("a GPU pod in namespace %s is not created %s the queue gate %s (last answer: %w)\n%s",
				namespace, map[bool]string{true: "with", false: "without"}[want], e.Names.QueueGate, err, e.Admission.LogTail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RecordsPolicyOn reports whether the chart's records policy (the
// ValidatingAdmissionPolicy that lets only Rota write Rota's records) is
// bound.
func (e *Env) RecordsPolicyOn(ctx context.Context) (bool, error) {
	_, err := e.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, WebhookName+"-records", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// SetRecordsPolicy installs (on) or removes the chart's records policy and
// its binding, named WebhookName-records, and waits until the API server
// enforces the change: a pod created (dry-run) with an assignment
// annotation is refused, or accepted. It returns whether the policy was
// on before, so a scenario can restore it.
func (e *Env) SetRecordsPolicy(ctx context.Context, on bool) (was bool, err error) {
	if was, err = e.RecordsPolicyOn(ctx); err != nil || was == on {
		return was, err
	}
	api := e.Client.AdmissionregistrationV1()
	if on {
		w, err := e.chartWebhooks()
		if err != nil {
			return was, err
		}
		if len(w.Policies) == 0 {
			return was, errors.New("the manifests have no records policy (recordsPolicy.enabled false?)")
		}
		for i, p := range w.Policies {
			// The chart's names (<release>-records, <release>-job-records)
			// under this Env's webhook name.
			name := WebhookName + strings.TrimPrefix(p.Name, "rota")
			b := w.PolicyBindings[i]
			p.ObjectMeta = metav1.ObjectMeta{Name: name}
			b.ObjectMeta = metav1.ObjectMeta{Name: name}
			b.Spec.PolicyName = name
			if _, err := api.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return was, fmt.Errorf("creating the records policy %s: %w", name, err)
			}
			if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
				return was, fmt.Errorf("binding the records policy %s: %w", name, err)
			}
		}
	} else {
		for _, name := range []string{WebhookName + "-records", WebhookName + "-job-records"} {
			if err := api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return was, err
			}
			if err := api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return was, err
			}
		}
	}
	return was, e.waitRecordsPolicy(ctx, on)
}

// waitRecordsPolicy creates (dry-run) a GPU-free pod carrying an
// assignment annotation until the API server refuses it (want) or accepts
// it.
func (e *Env) waitRecordsPolicy(ctx context.Context, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rota-records-probe", Namespace: metav1.NamespaceDefault,
			Annotations: map[string]string{e.Names.AssignmentAnnotation: "{}"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
	}
	for {
		_, err := e.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused := err != nil && strings.Contains(err.Error(), "is Rota's record")
		if refused == want && (want || err == nil) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the records policy is not %s (last answer: %w)", map[bool]string{true: "enforced", false: "gone"}[want], err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HasQueueGate reports whether a pod carries the scheduling gate gate.
func HasQueueGate(p *corev1.Pod, gate string) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == gate })
}

// ClientAs returns a client that authenticates as one of Rota's binaries
// (rota-extender, rota-admission, rota-device-plugin): its chart
// ServiceAccount, or the admin with Options.AdminCredentials.
func (e *Env) ClientAs(binary string) (kubernetes.Interface, error) {
	path, ok := e.kubeconfs[binary]
	if !ok {
		return nil, fmt.Errorf("no identity for %q; want one of %s", binary, strings.Join(rotaBinaries, ", "))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// SetNamespaceQueueing labels a namespace with queueing off (on: false) or
// removes the label (on: true).
func (e *Env) SetNamespaceQueueing(ctx context.Context, namespace string, on bool) error {
	ns, err := e.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	if on {
		delete(ns.Labels, e.Names.QueueingLabel)
	} else {
		ns.Labels[e.Names.QueueingLabel] = contract.QueueingOff
	}
	if _, err = e.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if q, err := e.QueueingOn(ctx); err != nil || !q {
		return err
	}
	// The API server and rota-admission each learn the label from their
	// own watch: wait until both leave new GPU pods of the namespace alone.
	return e.waitQueueGate(ctx, namespace, on)
}

// SetQuota replaces the quota configuration (the ConfigMap rota-admission
// and rota-extender watch) and returns the document it replaced.
func (e *Env) SetQuota(ctx context.Context, doc string) (was string, err error) {
	api := e.Client.CoreV1().ConfigMaps(SystemNamespace)
	cm, err := api.Get(ctx, QuotaConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	was = cm.Data[QuotaKey]
	cm.Data[QuotaKey] = doc
	_, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	return was, err
}
