package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// hours formats seconds as hours with two decimals.
func hours(s float64) string { return fmt.Sprintf("%.2f h", s/3600) }

// WriteTimedTable writes the headline of each timed result (one column per
// result, in order) as a markdown table, then the waits per job kind and
// the quota use per team.
func WriteTimedTable(w io.Writer, rs []TimedResult) error {
	var b strings.Builder
	tableHead(&b, "", "measure", rs)
	row := func(name string, f func(TimedResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(&b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	row("jobs placed / submitted", func(r TimedResult) string { return fmt.Sprintf("%d / %d", r.Placed, r.Jobs) })
	row("mean GPU allocation over arrivals (%)", func(r TimedResult) string { return fmt.Sprintf("%.2f", r.UtilMean) })
	row("queue wait p50", func(r TimedResult) string { return hours(r.Wait.P50) })
	row("queue wait p99", func(r TimedResult) string { return hours(r.Wait.P99) })
	row("GPU-hours idle while work waited", func(r TimedResult) string { return fmt.Sprintf("%.0f", r.LostGPUHours) })
	row(fmt.Sprintf("GPU-hours idle while a gang of %d+ GPUs waited", LargeGangGPUs), func(r TimedResult) string {
		return fmt.Sprintf("%.0f", r.LargeGangIdleGPUHours)
	})
	row("longest wait of a 1-GPU job", func(r TimedResult) string { return hours(r.SmallMaxWait) })
	row("gangs partly placed", func(r TimedResult) string { return fmt.Sprint(r.GangPartial) })
	if slices.ContainsFunc(rs, func(r TimedResult) bool { return r.Deadlines > 0 }) {
		row("jobs that ended by their deadline / had one", func(r TimedResult) string {
			return fmt.Sprintf("%d / %d", r.DeadlinesMet, r.Deadlines)
		})
	}
	row("Jain's fairness of team GPU shares (time mean)", func(r TimedResult) string { return fmt.Sprintf("%.3f", r.Jain) })
	row("last job left at", func(r TimedResult) string { return hours(r.End) })
	if slices.ContainsFunc(rs, func(r TimedResult) bool { return r.Reserve }) {
		row("jobs held for / holds released at their maximum", func(r TimedResult) string {
			if !r.Reserve {
				return "-"
			}
			return fmt.Sprintf("%d / %d", r.Reserved, r.Released)
		})
		row("pods backfilled onto held GPUs", func(r TimedResult) string { return fmt.Sprint(r.Backfilled) })
		row("GPU-hours held idle", func(r TimedResult) string { return fmt.Sprintf("%.0f", r.HeldIdleGPUHours) })
	}
	if len(rs) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	tableHead(&b, "Queue wait by job kind (p50 / p99 / max, placed of submitted)", "kind", rs)
	for k, ks := range rs[0].Kinds {
		fmt.Fprintf(&b, "| %s (%.0f GPUs/job) |", ks.Group, ks.MeanGPUsPerJob)
		for _, r := range rs {
			if k < len(r.Kinds) {
				s := r.Kinds[k]
				fmt.Fprintf(&b, " %s / %s / %s, %d of %d |", hours(s.P50), hours(s.P99), hours(s.Max), s.Placed, s.Jobs)
			}
		}
		b.WriteString("\n")
	}
	if len(rs[0].Teams) > 0 {
		tableHead(&b, "Quota use by team (GPUs: guarantee; mean / peak running; peak borrowed; jobs held for quota, longest hold; wait p50 / p99)", "team", rs)
		for k, ts := range rs[0].Teams {
			fmt.Fprintf(&b, "| %s (%.0f) |", ts.Team, ts.GuaranteeGPUs)
			for _, r := range rs {
				if k < len(r.Teams) {
					s := r.Teams[k]
					fmt.Fprintf(&b, " %.0f / %.0f; %.0f; %d, %s; %s / %s |", s.MeanGPUs, s.PeakGPUs, s.PeakBorrowedGPUs, s.Held, hours(s.HoldMax),
						hours(s.WaitP50), hours(s.WaitP99))
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteUtilCSV writes every result's utilization samples:
// policy,t_hours,alloc_pct,queued_gpus.
func WriteUtilCSV(w io.Writer, rs []TimedResult) error {
	var b strings.Builder
	b.WriteString("policy,t_hours,alloc_pct,queued_gpus\n")
	for _, r := range rs {
		for _, p := range r.Util {
			fmt.Fprintf(&b, "%s,%.3f,%.2f,%.1f\n", r.Policy, p.T/3600, p.Alloc, p.QueuedGPUs)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tableHead starts a Markdown table, after its title unless that is "": a
// first column named first, then one column per policy.
func tableHead(b *strings.Builder, title, first string, rs []TimedResult) {
	if title != "" {
		fmt.Fprintf(b, "\n%s\n\n", title)
	}
	fmt.Fprintf(b, "| %s |", first)
	for _, r := range rs {
		if r.Label != "" {
			fmt.Fprintf(b, " %s |", r.Label)
		} else if r.Queue == QueueDRF && r.Reserve {
			fmt.Fprintf(b, " %s, Rota queue + reservations |", r.Policy)
		} else if r.Queue == QueueDRF {
			fmt.Fprintf(b, " %s, Rota queue |", r.Policy)
		} else {
			fmt.Fprintf(b, " %s |", r.Policy)
		}
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---:|", len(rs)))
	b.WriteString("\n")
}
