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

// blockBindings makes the API server refuse every Binding in namespace ns
// (a ValidatingAdmissionPolicy on pods/binding), so each of the extender's
// binds fails as it would when the API server rejects it. It returns once
// the policy is enforced; unblock (also run at cleanup) removes it.
func blockBindings(ctx context.Context, t *testing.T, ns string) (unblock func()) {
	t.Helper()
	name := "rota-e2e-block-bindings-" + ns
	adm := env.Client.AdmissionregistrationV1()
	fail := admissionregistrationv1.Fail
	_, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
							Resources: []string{"pods/binding"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "e2e: bindings in " + ns + " are blocked"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := false
	unblock = func() {
		if done {
			return
		}
		done = true
		for _, err := range []error{
			adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{}),
			adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("removing the binding block: %v", err)
			}
		}
		// Lifted once a dry-run Binding of a pod that does not exist gets
		// past admission (and fails for the missing pod instead).
		if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true,
			func(ctx context.Context) (bool, error) {
				err := probeBinding(ctx, ns)
				return err != nil && !strings.Contains(err.Error(), name), nil
			}); err != nil {
			t.Errorf("the binding block in %s was never lifted: %v", ns, err)
		}
	}
	t.Cleanup(unblock)
	// Enforced once a dry-run Binding is refused by the policy.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := probeBinding(ctx, ns)
		return err != nil && strings.Contains(err.Error(), name), nil
	}); err != nil {
		t.Fatalf("the binding block in %s was never enforced: %v", ns, err)
	}
	return unblock
}

// probeBinding creates a dry-run Binding for a pod that does not exist.
func probeBinding(ctx context.Context, ns string) error {
	return env.Client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rota-e2e-binding-probe"},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "rota-e2e-no-such-node"},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}
