// Package binder performs rota-extender's API writes for one pod: the
// Binding (pods/binding subresource) that carries the assignment
// annotation, and the requeue touch. It also reads a pod the informer does
// not hold yet. It keeps no state; a Binder is safe for concurrent use.
package binder

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/pkg/contract"
)

// Binder writes through a kubernetes.Interface.
type Binder struct {
	client  kubernetes.Interface
	names   contract.Names
	timeout time.Duration
	// OnConflict, when set, is called for every Binding the API server
	// refuses with a conflict (pod replaced or already bound).
	OnConflict func()
}

// New returns a Binder; timeout bounds each API call (0: none beyond ctx).
func New(client kubernetes.Interface, names contract.Names, timeout time.Duration) *Binder {
	return &Binder{client: client, names: names, timeout: timeout}
}

func (b *Binder) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, b.timeout)
}

// Pod reads a pod from the API server.
func (b *Binder) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	pod, err := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return pod, nil
}

// Bind creates the pod's Binding to node: one API write. The API server
// copies the Binding's annotations onto the pod in the same update that sets
// spec.nodeName, so a pod is never seen bound without its assignment, nor
// carrying an assignment for a node it is not bound to. The Binding's UID is
// a precondition (a replaced pod fails with a conflict), and the API server
// refuses a pod that is already bound or being deleted.
func (b *Binder) Bind(ctx context.Context, namespace, name string, uid types.UID, node string, annotations map[string]string) error {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	err := b.client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) && b.OnConflict != nil {
			b.OnConflict()
		}
		return fmt.Errorf("bind %s/%s to %s: %w", namespace, name, node, err)
	}
	return nil
}

// Touch writes the requeue annotation, conditional only on the pod's UID,
// so that kube-scheduler sees an update of the pod and retries it.
func (b *Binder) Touch(ctx context.Context, namespace, name string, uid types.UID, why string, now time.Time) error {
	v := now.UTC().Format(time.RFC3339Nano) + " " + why
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": uid, "annotations": map[string]string{b.names.RequeueAnnotation(): v}}})
	if err != nil {
		return err
	}
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	if _, err := b.client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("touch %s/%s: %w", namespace, name, err)
	}
	return nil
}
