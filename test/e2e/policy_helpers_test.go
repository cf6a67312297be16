//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// refuseByPolicy makes the API server refuse the requests match selects
// whose CEL expression is false (a ValidatingAdmissionPolicy named name and
// its binding), the way the scenarios inject faults no component reports.
// It returns once probe, a harmless request the policy refuses, is refused
// with name in the error. lift removes the policy (it also runs at cleanup)
// and, with wait, returns once probe is no longer refused by it.
func refuseByPolicy(ctx context.Context, t *testing.T, name string, match *admissionregistrationv1.MatchResources,
	expression, message string, probe func(context.Context) error) (lift func(wait bool)) {
	t.Helper()
	adm := env.Client.AdmissionregistrationV1()
	fail := admissionregistrationv1.Fail
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail, MatchConstraints: match,
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lifted := false
	lift = func(wait bool) {
		t.Helper()
		if !lifted {
			lifted = true
			for _, err := range []error{
				adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{}),
				adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{}),
			} {
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("removing admission policy %s: %v", name, err)
				}
			}
		}
		if wait {
			pollRefused(t, name, probe, false)
		}
	}
	t.Cleanup(func() { lift(false) })
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pollRefused(t, name, probe, true)
	return lift
}

// pollRefused waits (30 s at most) until probe is refused by policy name, or
// no longer is.
func pollRefused(t *testing.T, name string, probe func(context.Context) error, want bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			err := probe(ctx)
			return (err != nil && strings.Contains(err.Error(), name)) == want, nil
		}); err != nil {
		t.Fatalf("admission policy %s: refusing = %v never came true: %v", name, want, err)
	}
}

// blockBindings makes the API server refuse every Binding in namespace ns,
// so each of the extender's binds fails as it would when the API server
// rejects it. It returns once that is enforced; unblock (also run at
// cleanup) removes it and waits until Bindings pass admission again.
func blockBindings(ctx context.Context, t *testing.T, ns string) (unblock func()) {
	t.Helper()
	lift := refuseByPolicy(ctx, t, "rota-e2e-block-bindings-"+ns, &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/binding"}},
			},
		}},
	}, "false", "e2e: bindings in "+ns+" are blocked", func(ctx context.Context) error {
		// A dry-run Binding of a pod that does not exist: refused by the
		// policy, or past admission and failing for the missing pod.
		return env.Client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rota-e2e-binding-probe"},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "rota-e2e-no-such-node"},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	})
	return func() { lift(true) }
}
