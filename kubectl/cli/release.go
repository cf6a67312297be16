package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/pkg/contract"
)

// Release is what `kubectl rota release` did (its -o json/yaml form).
type Release struct {
	Node string `json:"node"`
	// Targets are what returns to placement: "node" and GPU UUIDs.
	Targets []string `json:"targets"`
	// Annotation is the annotation written: <domain>/quarantine=release.
	Annotation string `json:"annotation"`
	DryRun     bool   `json:"dryRun,omitempty"`
	// AlreadyRequested: the annotation was already there; nothing written.
	AlreadyRequested bool `json:"alreadyRequested,omitempty"`
	// Released: with --wait, rota-extender cleared the annotation and taint.
	Released bool `json:"released"`
}

// releasePollInterval is how often --wait reads the Node back.
var releasePollInterval = 250 * time.Millisecond

// releaseTarget turns the command's arguments into a node name, or says
// why it cannot: NODE, node NODE, node/NODE; a GPU is released with its
// node.
func releaseTarget(rest []string) (node, gpu string, err error) {
	arg := rest[0]
	if len(rest) == 2 {
		switch rest[0] {
		case "node", "nodes", "no":
			return rest[1], "", nil
		case "gpu", "gpus":
			return "", rest[1], nil
		}
		return "", "", fmt.Errorf("release: want NODE, node NODE or gpu UUID, got %q", strings.Join(rest, " "))
	}
	if kind, name, ok := strings.Cut(arg, "/"); ok {
		switch kind {
		case "node", "nodes", "no":
			return name, "", nil
		case "gpu", "gpus":
			return "", name, nil
		}
		return "", "", fmt.Errorf("release: %s: only nodes (and GPUs, through their node) are quarantined", arg)
	}
	if strings.HasPrefix(arg, "GPU-") {
		return "", arg, nil
	}
	return arg, "", nil
}

// runRelease writes <domain>/quarantine=release on a quarantined node:
// rota-extender's remediation controller then returns the node and its
// GPUs to placement and removes the quarantine taint and annotation.
func runRelease(ctx context.Context, cs kubernetes.Interface, p *printer, names contract.Names, rest []string, o options) error {
	node, gpu, err := releaseTarget(rest)
	if err != nil {
		return err
	}
	if gpu != "" {
		return releaseGPUHint(ctx, cs, names, gpu)
	}
	nodes := cs.CoreV1().Nodes()
	var r Release
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s not found%s", node, quarantinedNow(ctx, cs, names))
		}
		if err != nil {
			return fmt.Errorf("get node %s: %w", node, err)
		}
		q := report.NodeQuarantine(n, names)
		r = Release{Node: node, Targets: q.Targets(), Annotation: names.QuarantineAnnotation + "=" + contract.QuarantineRelease,
			DryRun: o.dryRun}
		switch {
		case q.ReleasePending:
			r.AlreadyRequested = true
			return nil
		case !q.Quarantined():
			return fmt.Errorf("node %s is not quarantined (no %s annotation, no %s taint)%s",
				node, names.QuarantineAnnotation, names.QuarantineTaint, quarantinedNow(ctx, cs, names))
		case o.dryRun:
			return nil
		}
		// The resourceVersion makes the patch fail with a conflict when the
		// quarantine changed since it was read: what is printed is what
		// is released.
		meta := map[string]any{"annotations": map[string]string{names.QuarantineAnnotation: contract.QuarantineRelease}}
		if n.ResourceVersion != "" {
			meta["resourceVersion"] = n.ResourceVersion
		}
		patch, err := json.Marshal(map[string]any{"metadata": meta})
		if err != nil {
			return err
		}
		if _, err := nodes.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-rota"}); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("write %s on node %s: %w", r.Annotation, node, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if o.wait > 0 && !o.dryRun {
		if err := waitReleased(ctx, cs, names, node, o.wait); err != nil {
			return err
		}
		r.Released = true
	}
	return p.print(r, func(w io.Writer) error { return releaseText(w, r, names) })
}

// waitReleased polls the Node until rota-extender has cleared the
// quarantine annotation and taint, for at most d.
func waitReleased(ctx context.Context, cs kubernetes.Interface, names contract.Names, node string, d time.Duration) error {
	var last report.Quarantine
	err := wait.PollUntilContextTimeout(ctx, releasePollInterval, d, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get node %s: %w", node, err)
		}
		last = report.NodeQuarantine(n, names)
		return !last.ReleasePending && !last.Quarantined(), nil
	})
	switch {
	case err == nil:
		return nil
	case wait.Interrupted(err) && ctx.Err() == nil:
		state := "the release annotation is still there"
		if !last.ReleasePending {
			state = "the node is quarantined again (" + strings.Join(last.Targets(), ", ") + ")"
		}
		return fmt.Errorf("node %s: rota-extender did not complete the release within %s: %s "+
			"(is it running with --remediation=on?)", node, d, state)
	}
	return err
}

// releaseGPUHint answers a GPU argument: quarantine is released per node,
// so it names the node to release.
func releaseGPUHint(ctx context.Context, cs kubernetes.Interface, names contract.Names, uuid string) error {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, q := range report.Quarantines(l.Items, names) {
		for _, g := range q.GPUs {
			if g == uuid {
				return fmt.Errorf("release works per node: GPU %s is quarantined on node %s; "+
					"kubectl rota release %s returns it and the node's other quarantined targets (%s) to placement",
					uuid, q.Node, q.Node, strings.Join(q.Targets(), ", "))
			}
		}
	}
	return fmt.Errorf("GPU %s is not quarantined on any node%s", uuid, quarantinedNow(ctx, cs, names))
}

// quarantinedNow lists the quarantined nodes for an error message.
func quarantinedNow(ctx context.Context, cs kubernetes.Interface, names contract.Names) string {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var qs []string
	for _, q := range report.Quarantines(l.Items, names) {
		if q.Quarantined() {
			qs = append(qs, q.Node+" ("+strings.Join(q.Targets(), ", ")+")")
		}
	}
	if len(qs) == 0 {
		return "; no node is quarantined"
	}
	return "; quarantined: " + strings.Join(qs, ", ")
}

func releaseText(out io.Writer, r Release, names contract.Names) error {
	lw := &lineWriter{w: out}
	what := strings.Join(r.Targets, ", ")
	switch {
	case r.AlreadyRequested && r.Released:
		lw.printf("node/%s released: rota-extender cleared %s and the %s taint\n", r.Node, names.QuarantineAnnotation, names.QuarantineTaint)
	case r.AlreadyRequested:
		lw.printf("node/%s: release already requested (%s); waiting for rota-extender to act on it\n", r.Node, r.Annotation)
	case r.DryRun:
		lw.printf("node/%s: would release %s by setting %s (dry run: nothing written)\n", r.Node, what, r.Annotation)
	case r.Released:
		lw.printf("node/%s released: %s back in placement; rota-extender cleared %s and the %s taint\n",
			r.Node, what, names.QuarantineAnnotation, names.QuarantineTaint)
	default:
		lw.printf("node/%s: release requested for %s (%s); rota-extender returns them to placement and removes the %s taint on its next pass\n",
			r.Node, what, r.Annotation, names.QuarantineTaint)
	}
	return lw.err
}
