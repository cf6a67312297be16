package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Series is every seed's result for one (pod list, policy) pair.
type Series struct {
	Pods    string
	Policy  string
	Results []Result
}

// Stat is a mean and sample standard deviation over seeds.
type Stat struct {
	Mean, SD float64
	N        int
}

func stat(v []float64) Stat {
	s := Stat{N: len(v)}
	if s.N == 0 {
		return s
	}
	for _, x := range v {
		s.Mean += x
	}
	s.Mean /= float64(s.N)
	if s.N > 1 {
		var ss float64
		for _, x := range v {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.SD = math.Sqrt(ss / float64(s.N-1))
	}
	return s
}

// At summarises the series at x percent arrived: allocation ratio,
// fragmentation and fragmentation ratio over the seeds that reached x.
func (s Series) At(x int) (alloc, frag, ratio Stat) {
	var a, f, r []float64
	for _, res := range s.Results {
		if p := res.At(x); p.N > 0 {
			a, f, r = append(a, p.Alloc), append(f, p.Frag), append(r, p.FragRatio)
		}
	}
	return stat(a), stat(f), stat(r)
}

// Published are the FGD paper's allocation ratios at 100 % arrived on the
// default openb list (mean of 10 seeds, analysis_allo_discrete.csv).
var Published = map[string]float64{
	Random: 86.30, DotProduct: 90.62, GPUClustering: 91.65, GPUPacking: 91.78, BestFit: 92.86, "fgd": 95.23,
}

// WriteTable writes a Markdown table: one row per policy, one column per pod
// list, each cell the allocation ratio at x percent arrived as mean ± sd.
func WriteTable(w io.Writer, series []Series, x int) error {
	var lists, policies []string
	cell := map[[2]string]Series{}
	for _, s := range series {
		if !slices.Contains(lists, s.Pods) {
			lists = append(lists, s.Pods)
		}
		if !slices.Contains(policies, s.Policy) {
			policies = append(policies, s.Policy)
		}
		cell[[2]string{s.Pods, s.Policy}] = s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GPU allocation ratio (%%) at %d%% arrived GPU request, mean ± sd over seeds\n\n| policy |", x)
	for _, l := range lists {
		fmt.Fprintf(&b, " %s |", l)
	}
	b.WriteString("\n|---|")
	for range lists {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, p := range policies {
		fmt.Fprintf(&b, "| %s |", p)
		for _, l := range lists {
			s, ok := cell[[2]string{l, p}]
			if !ok {
				b.WriteString(" |")
				continue
			}
			a, _, _ := s.At(x)
			fmt.Fprintf(&b, " %.2f ± %.2f |", a.Mean, a.SD)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMovesTable writes a Markdown table of the moves made to place pods
// (Config.MoveBudget): one row per (pod list, policy), with the allocation
// ratio at x percent arrived and the pods moved by then, as a share of the
// pods arrived by then (mean ± sd over seeds) and in total.
func WriteMovesTable(w io.Writer, series []Series, x int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| pods | policy | allocated at %d%% (%%) | moved by then (%% of arrived pods) | pods moved by then | pods placed by moves, whole run |\n|---|---|---:|---:|---:|---:|\n", x)
	for _, s := range series {
		var share, moves, plans []float64
		for _, r := range s.Results {
			p := r.At(x)
			if p.N == 0 || p.Arrived == 0 {
				continue
			}
			share = append(share, 100*float64(p.Moves)/float64(p.Arrived))
			moves = append(moves, float64(p.Moves))
			plans = append(plans, float64(r.MovePlans))
		}
		a, _, _ := s.At(x)
		sh, mv, pl := stat(share), stat(moves), stat(plans)
		fmt.Fprintf(&b, "| %s | %s | %.2f ± %.2f | %.2f ± %.2f | %.0f | %.0f |\n", s.Pods, s.Policy, a.Mean, a.SD, sh.Mean, sh.SD, mv.Mean, pl.Mean)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteResultsCSV writes one row per run with its values at x percent.
func WriteResultsCSV(w io.Writer, series []Series, x int) error {
	var b strings.Builder
	b.WriteString("pods,policy,seed,arrived,placed,failed,alloc_pct,frag_pct,frag_ratio_pct\n")
	for _, s := range series {
		for _, r := range s.Results {
			p := r.At(x)
			fmt.Fprintf(&b, "%s,%s,%d,%d,%d,%d,%.4f,%.4f,%.4f\n", s.Pods, s.Policy, r.Seed, r.Arrived, r.Placed, r.Failed, p.Alloc, p.Frag, p.FragRatio)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCurvesCSV writes the curves: one row per (pod list, policy, arrived
// percentage) with the mean and sd over seeds of each metric.
func WriteCurvesCSV(w io.Writer, series []Series) error {
	var b strings.Builder
	b.WriteString("pods,policy,arrived_pct,seeds,alloc_mean,alloc_sd,frag_mean,frag_sd,frag_ratio_mean,frag_ratio_sd\n")
	for _, s := range series {
		n := 0
		for _, r := range s.Results {
			n = max(n, len(r.Curve))
		}
		for x := range n {
			a, f, r := s.At(x)
			if a.N == 0 {
				continue
			}
			fmt.Fprintf(&b, "%s,%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", s.Pods, s.Policy, x, a.N, a.Mean, a.SD, f.Mean, f.SD, r.Mean, r.SD)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// palette is colour-blind-friendly (Okabe-Ito), one colour per policy.
var palette = []string{"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"}

// WriteSVG draws the allocation ratio against arrived GPU request, one line
// per policy (mean over seeds), for the series of one pod list. The y axis
// spans yMin..100 % (yMin 0: automatic), x spans 0..the longest curve.
func WriteSVG(w io.Writer, title string, series []Series, yMin float64) error {
	const (
		width, height          = 820.0, 520.0
		left, right, top, bott = 70.0, 190.0, 50.0, 60.0
	)
	pw, ph := width-left-right, height-top-bott
	xMax := 0
	lo := 100.0
	for _, s := range series {
		for _, r := range s.Results {
			xMax = max(xMax, len(r.Curve)-1)
		}
		for x := 0; x <= xMax; x++ {
			if a, _, _ := s.At(x); a.N > 0 && x >= 50 {
				lo = math.Min(lo, a.Mean)
			}
		}
	}
	if xMax == 0 {
		xMax = 130
	}
	if yMin <= 0 {
		yMin = math.Max(0, math.Floor(lo/10)*10-10)
	}
	px := func(x float64) float64 { return left + pw*x/float64(xMax) }
	py := func(y float64) float64 { return top + ph*(1-(y-yMin)/(100-yMin)) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="25" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	// Grid and axes.
	for x := 0; x <= xMax; x += 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", px(float64(x)), top, px(float64(x)), top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", px(float64(x)), top+ph+18, x)
	}
	step := 10.0
	if 100-yMin <= 30 {
		step = 5
	}
	for y := yMin; y <= 100+1e-9; y += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, py(y), left+pw, py(y))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, py(y)+4, y)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">arrived GPU request (%% of GPU capacity)</text>`+"\n", left+pw/2, height-15)
	fmt.Fprintf(&b, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">GPU allocation ratio (%%)</text>`+"\n", top+ph/2)
	// One polyline per policy, then its legend entry.
	for i, s := range series {
		colour := palette[i%len(palette)]
		var pts []string
		for x := 0; x <= xMax; x++ {
			a, _, _ := s.At(x)
			if a.N == 0 || a.Mean < yMin {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(x)), py(a.Mean)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		a, _, _ := s.At(100)
		ly := top + 10 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", left+pw+12, ly, left+pw+32, ly, colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s (%.2f)</text>`+"\n", left+pw+38, ly+4, html.EscapeString(s.Policy), a.Mean)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555">(value at 100%%)</text>`+"\n", left+pw+12, top+20+float64(len(series))*20)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
