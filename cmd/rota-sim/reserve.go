package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/sim"
)

// bucket groups jobs by GPU request for the table over seeds.
type bucket struct {
	name string
	in   func(gpus float64) bool
}

var buckets = []bucket{
	{"1-GPU jobs (one GPU or a share)", func(g float64) bool { return g > 0 && g <= 1 }},
	{"4-32 GPU jobs (2-63 GPUs)", func(g float64) bool { return g > 1 && g < 64 }},
	{"64-1024 GPU gangs", func(g float64) bool { return g >= 64 }},
	{"of which 512-1024 GPU gangs", func(g float64) bool { return g >= 512 }},
	{"CPU-only jobs", func(g float64) bool { return g == 0 }},
}

// pooled is the waits of one bucket over every seed's jobs.
type pooled struct {
	// waits are the waits; room the parts of them not spent waiting for
	// quota.
	waits, room []float64
	// bound are the least possible waits for room (sim.JobWait.RoomBound).
	bound  []float64
	placed int
}

func pool(rs []sim.TimedResult, b bucket) pooled {
	var p pooled
	for _, r := range rs {
		for _, w := range r.Waits {
			if b.in(w.GPUs) {
				p.waits = append(p.waits, w.Wait)
				p.room = append(p.room, w.Wait-w.QuotaWait)
				p.bound = append(p.bound, w.RoomBound)
				if w.Placed {
					p.placed++
				}
			}
		}
	}
	slices.Sort(p.waits)
	slices.Sort(p.room)
	slices.Sort(p.bound)
	return p
}

// q is the nearest-rank quantile of sorted v (0 when empty).
func q(v []float64, f float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := int(math.Ceil(f*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func h(s float64) string { return fmt.Sprintf("%.2f h", s/3600) }

// column returns variant vi's results over the seeds.
func column(results [][]sim.TimedResult, vi int) []sim.TimedResult {
	out := make([]sim.TimedResult, len(results))
	for si := range results {
		out[si] = results[si][vi]
	}
	return out
}

// writeReserveTable writes the comparison over every seed: waits per GPU
// bucket (pooled over the seeds' jobs), utilization and idle GPU-hours (mean
// per seed), the reservations' counts, each seed's longest wait of a large
// gang, and the goals for each reservation column against the same
// policy's drf column.
func writeReserveTable(w io.Writer, o options, variants []variant, seeds []uint64, results [][]sim.TimedResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nOver %d seeds (%s), waits pooled over every seed's jobs (p50 / p99 / max, placed of submitted); "+
		"reservations: large %d GPUs, max age %s, max hold %s, cool-off %s, at most %d, slack %s, default runtime %s\n\n",
		len(seeds), seedList(seeds), o.reserveLarge, o.reserveMaxAge, o.maxHold, o.coolOff, o.maxReservations, o.reserveSlack, o.defaultRuntime)
	b.WriteString("| measure |")
	for _, v := range variants {
		fmt.Fprintf(&b, " %s |", v)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(variants)) + "\n")
	row := func(name string, f func(rs []sim.TimedResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for vi := range variants {
			fmt.Fprintf(&b, " %s |", f(column(results, vi)))
		}
		b.WriteString("\n")
	}
	for _, bk := range buckets {
		row("wait, "+bk.name, func(rs []sim.TimedResult) string {
			p := pool(rs, bk)
			return fmt.Sprintf("%s / %s / %s, %d of %d", h(q(p.waits, 0.5)), h(q(p.waits, 0.99)), h(q(p.waits, 1)), p.placed, len(p.waits))
		})
	}
	for _, bk := range buckets[2:4] {
		row("wait for room (not quota), "+bk.name, func(rs []sim.TimedResult) string {
			p := pool(rs, bk)
			return fmt.Sprintf("%s / %s / %s", h(q(p.room, 0.5)), h(q(p.room, 0.99)), h(q(p.room, 1)))
		})
	}
	for _, bk := range buckets[2:4] {
		row("least possible wait for room without preemption, "+bk.name, func(rs []sim.TimedResult) string {
			p := pool(rs, bk)
			return fmt.Sprintf("%s / %s / %s", h(q(p.bound, 0.5)), h(q(p.bound, 0.99)), h(q(p.bound, 1)))
		})
	}
	row("share of the 64-1024 GPU gangs' wait spent waiting for quota", func(rs []sim.TimedResult) string {
		var all, quota float64
		for _, r := range rs {
			for _, w := range r.Waits {
				if buckets[2].in(w.GPUs) {
					all, quota = all+w.Wait, quota+w.QuotaWait
				}
			}
		}
		if all == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f %%", 100*quota/all)
	})
	mean := func(rs []sim.TimedResult, f func(sim.TimedResult) float64) (m, lo, hi float64) {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, r := range rs {
			v := f(r)
			m += v
			lo, hi = min(lo, v), max(hi, v)
		}
		return m / float64(len(rs)), lo, hi
	}
	row("mean GPU allocation over arrivals (%), mean of seeds (min..max)", func(rs []sim.TimedResult) string {
		m, lo, hi := mean(rs, func(r sim.TimedResult) float64 { return r.UtilMean })
		return fmt.Sprintf("%.2f (%.2f..%.2f)", m, lo, hi)
	})
	perSeed := func(name string, f func(sim.TimedResult) float64) {
		row(name+", mean per seed (min..max)", func(rs []sim.TimedResult) string {
			m, lo, hi := mean(rs, f)
			return fmt.Sprintf("%.0f (%.0f..%.0f)", m, lo, hi)
		})
	}
	perSeed(fmt.Sprintf("GPU-hours idle while a gang of %d+ GPUs waited", sim.LargeGangGPUs), func(r sim.TimedResult) float64 { return r.LargeGangIdleGPUHours })
	perSeed("GPU-hours idle while work waited", func(r sim.TimedResult) float64 { return r.LostGPUHours })
	perSeed("GPU-hours held idle", func(r sim.TimedResult) float64 { return r.HeldIdleGPUHours })
	row("jobs held for / holds released at max hold / pods backfilled (all seeds)", func(rs []sim.TimedResult) string {
		var held, rel, bf int
		for _, r := range rs {
			held, rel, bf = held+r.Reserved, rel+r.Released, bf+r.Backfilled
		}
		return fmt.Sprintf("%d / %d / %d", held, rel, bf)
	})
	row("gangs partly placed (all seeds)", func(rs []sim.TimedResult) string {
		n := 0
		for _, r := range rs {
			n += r.GangPartial
		}
		return fmt.Sprint(n)
	})
	large := buckets[2]
	fmt.Fprintf(&b, "\nLongest wait of a %s, and mean GPU allocation, per seed\n\n| seed |", large.name)
	for _, v := range variants {
		fmt.Fprintf(&b, " %s |", v)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(variants)) + "\n")
	for si, seed := range seeds {
		fmt.Fprintf(&b, "| %d |", seed)
		for vi := range variants {
			r := results[si][vi]
			p := pool([]sim.TimedResult{r}, large)
			fmt.Fprintf(&b, " %s, %.2f %% |", h(q(p.waits, 1)), r.UtilMean)
		}
		b.WriteString("\n")
	}
	// The goals, for each reservation column against its policy's drf one.
	for vi, v := range variants {
		if !v.reserve {
			continue
		}
		base := slices.Index(variants, variant{policy: v.policy, queue: sim.QueueDRF})
		if base < 0 {
			continue
		}
		today, with := column(results, base), column(results, vi)
		bigT, bigW := pool(today, large), pool(with, large)
		oneT, oneW := pool(today, buckets[0]), pool(with, buckets[0])
		uT, _, _ := mean(today, func(r sim.TimedResult) float64 { return r.UtilMean })
		uW, _, _ := mean(with, func(r sim.TimedResult) float64 { return r.UtilMean })
		met := 0
		for si := range seeds {
			t, r := pool(today[si:si+1], large), pool(with[si:si+1], large)
			if q(r.waits, 1) <= q(t.waits, 1)/3 {
				met++
			}
		}
		fmt.Fprintf(&b, "\nGoals, %s against %s:\n", v, variants[base])
		fmt.Fprintf(&b, "- %s' longest wait %s vs %s: %s (goal <= 1/3); met in %d of %d seeds\n", large.name,
			h(q(bigW.waits, 1)), h(q(bigT.waits, 1)), ratio(q(bigW.waits, 1), q(bigT.waits, 1)), met, len(seeds))
		fmt.Fprintf(&b, "- %s' longest wait for room (not quota) %s vs %s: %s\n", large.name,
			h(q(bigW.room, 1)), h(q(bigT.room, 1)), ratio(q(bigW.room, 1), q(bigT.room, 1)))
		fmt.Fprintf(&b, "- the least possible longest wait for room of a %s without preemption (the jobs running at its arrival must end): %s\n",
			strings.TrimSuffix(large.name, "s"), h(q(bigT.bound, 1)))
		fmt.Fprintf(&b, "- mean GPU allocation %.2f %% vs %.2f %%: %+.2f points (goal: within 2)\n", uW, uT, uW-uT)
		fmt.Fprintf(&b, "- %s' p50 wait %s vs %s: %s (goal <= 1.5x)\n", buckets[0].name, h(q(oneW.waits, 0.5)), h(q(oneT.waits, 0.5)),
			ratio(q(oneW.waits, 0.5), q(oneT.waits, 0.5)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(a, b float64) string {
	switch {
	case b > 0:
		return fmt.Sprintf("%.2fx", a/b)
	case a == 0:
		return "both 0"
	}
	return "from 0"
}

func seedList(seeds []uint64) string {
	if len(seeds) > 2 && seeds[len(seeds)-1]-seeds[0] == uint64(len(seeds)-1) {
		return fmt.Sprintf("%d..%d", seeds[0], seeds[len(seeds)-1])
	}
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
