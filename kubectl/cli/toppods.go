package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/rota-sched/rota/kubectl/report"
)

// runTopPods prints the GPU pods' utilization and idle marks as their
// device plugins publish them on the pods (kubectl reads only the API
// server). namespace "" lists every namespace.
func runTopPods(ctx context.Context, f *fetcher, p *printer, env Env, ro report.Options, namespace string, o options) error {
	in, err := f.input(ctx, need{})
	if err != nil {
		return err
	}
	in.Now = env.Now()
	r := report.TopPods(in, ro, namespace, o.node)
	return p.print(r, func(w io.Writer) error { return p.podsText(w, r) })
}

func (p *printer) podsText(out io.Writer, r report.Pods) error {
	lw := &lineWriter{w: out}
	if len(r.Pods) == 0 {
		lw.printf("No running pods hold Rota GPUs.\n")
		return lw.err
	}
	t := &table{}
	t.row(plain, "POD", "NODE", "GPUS", "SM", "GPU MEM USED", "IDLE", "NOTE")
	for _, u := range r.Pods {
		gpus := fmt.Sprint(u.GPUs)
		if !u.Whole {
			gpus = "share " + u.AssignedMiB.String()
		}
		sm, used := "-", "-"
		if u.Utilization != nil {
			sm, used = fmt.Sprintf("%d%%", u.Utilization.SMPercent), u.Utilization.UsedMiB.String()
		}
		idle, c := "-", plain
		if u.Idle {
			idle, c = "idle", yellow
			if u.IdleFor != "" {
				idle = "idle " + u.IdleFor
			}
		}
		note := u.IdleMessage
		if u.Problem != "" {
			note, c = u.Problem, red
		}
		t.row(c, u.Pod, u.Node, gpus, sm, used, idle, note)
	}
	lw.table(t, p, "")
	lw.printf("\n%d pod(s), %d idle", len(r.Pods), r.Idle)
	if r.Unpublished > 0 {
		lw.printf("; %d without a published utilization (the device plugin's --publish-utilization is off, the node cannot sample per process, or the pod is new)", r.Unpublished)
	}
	lw.printf(".\n")
	return lw.err
}
