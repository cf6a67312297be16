package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
	"github.com/rota-sched/rota/test/kueue"
)

// existingStack is a cluster the evaluation did not start: a platform
// team's staging cluster with the stack it runs today. The job set goes
// into namespaces of its own (prefix-team), which must not exist, and are
// deleted afterwards; pods really run sleep in the image given. What it
// cannot see there it does not report: the control plane's CPU and API
// writes, and the team quotas the cluster enforces.
type existingStack struct {
	kubeconfig string
	prefix     string
	// as is the job shape: "whole" (whole GPUs, as with NVIDIA's device
	// plugin), "rota" (memory shares, in namespaces with Rota's team label
	// that queue Jobs suspended) or "kueue" (whole GPUs, queued through a
	// LocalQueue in each namespace that points at kueueCQ).
	as      string
	kueueCQ string
	names   contract.Names
	// label names the stack in the report.
	label string

	cfg     *rest.Config
	c       kubernetes.Interface
	created []string
}

func (s *existingStack) start(ctx context.Context, sc evaluate.Scenario, _ string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", s.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	s.cfg = cfg
	if s.c, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	var exist []string
	for _, t := range sc.Teams {
		if _, err := s.c.CoreV1().Namespaces().Get(ctx, s.namespace(t.Name), metav1.GetOptions{}); err == nil {
			exist = append(exist, s.namespace(t.Name))
		} else if !apierrors.IsNotFound(err) {
			return err
		}
	}
	if len(exist) > 0 {
		return fmt.Errorf("namespaces %s exist: the evaluation only creates its own (choose another -namespace-prefix)", strings.Join(exist, ", "))
	}
	labels := func(team string) map[string]string {
		l := map[string]string{"app.kubernetes.io/managed-by": "rota-evaluate"}
		if s.as == "rota" {
			l[s.names.TeamLabel] = team
			l[s.names.QueueingLabel] = contract.QueueingSuspend
		}
		return l
	}
	for _, t := range sc.Teams {
		s.created = append(s.created, s.namespace(t.Name))
	}
	if err := evalkit.CreateTeams(ctx, s.c, sc, s.namespace, labels); err != nil {
		return err
	}
	if s.as != "kueue" {
		return nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, t := range sc.Teams {
		lq := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
			"metadata": map[string]any{"name": localQueue, "namespace": s.namespace(t.Name)},
			"spec":     map[string]any{"clusterQueue": s.kueueCQ}}}
		if _, err := dyn.Resource(kueue.LocalQueues).Namespace(s.namespace(t.Name)).Create(ctx, lq, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("LocalQueue in %s: %w", s.namespace(t.Name), err)
		}
	}
	return nil
}

func (s *existingStack) client() kubernetes.Interface { return s.c }
func (s *existingStack) namespace(team string) string { return s.prefix + "-" + team }
func (s *existingStack) pids() map[string]int         { return nil }
func (s *existingStack) auditFiles() ([]string, error) {
	return nil, nil // not this evaluation's API server: its writes are not counted
}
func (s *existingStack) playsNode(string) bool                  { return false } // real kubelets run the pods
func (s *existingStack) check(context.Context) []evaluate.Check { return nil }

func (s *existingStack) shape() evalkit.Shape {
	switch s.as {
	case "rota":
		return evalkit.Shape{Shares: true, GangsWhole: true}
	case "kueue":
		return evalkit.Shape{Labels: map[string]string{"kueue.x-k8s.io/queue-name": localQueue}}
	}
	return evalkit.Shape{}
}

// stop deletes the namespaces it made (their Jobs and pods with them) and
// waits up to three minutes for them to go. Its pods only sleep, so they are
// deleted first with a one-second grace: the namespace controller otherwise
// waits out each pod's default grace (30 s) before it looks again, and a
// namespace with running pods takes about a minute to go.
func (s *existingStack) stop() error {
	if s.c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errs []error
	grace := int64(1)
	for _, ns := range s.created {
		err := s.c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		if err := s.c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, ns := range s.created {
		for {
			_, err := s.c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("namespace %s still terminating", ns))
				break
			}
			time.Sleep(time.Second)
		}
	}
	return errors.Join(errs...)
}
