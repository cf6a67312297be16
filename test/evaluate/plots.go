package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/rota-sched/rota/pkg/evaluate"
)

// stackColors keeps each stack's colour the same in every plot.
var stackColors = map[string]color.RGBA{
	"stock": {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"kueue": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"rota":  {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

var teamColors = []color.RGBA{{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}}

// stepLine draws a curve that holds each value until the next point.
func stepLine(pts []evaluate.Point, end float64) plotter.XYs {
	var xy plotter.XYs
	prev := 0.0
	xy = append(xy, plotter.XY{X: 0, Y: 0})
	for _, p := range pts {
		xy = append(xy, plotter.XY{X: p.T, Y: prev}, plotter.XY{X: p.T, Y: p.V})
		prev = p.V
	}
	if end > 0 {
		xy = append(xy, plotter.XY{X: end, Y: prev})
	}
	return xy
}

func png(p *plot.Plot, w, h vg.Length) (string, error) {
	c := vgimg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// allocationPlot overlays the stacks' GPU allocation over time.
func allocationPlot(sc evaluate.Scenario, results []evaluate.Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: GPUs allocated (shares as parts of a GPU)", sc.Name)
	p.X.Label.Text = "seconds since the first job"
	p.Y.Label.Text = "GPUs"
	p.Y.Min, p.Y.Max = 0, float64(sc.Cluster.GPUs())*1.05
	p.Legend.Top = true
	for _, res := range results {
		if res.Skipped != "" {
			continue
		}
		end := 0.0
		if n := len(res.Equivalent); n > 0 {
			end = res.Equivalent[n-1].T
		}
		l, err := plotter.NewLine(stepLine(res.Equivalent, end))
		if err != nil {
			return nil, err
		}
		l.Color = stackColors[res.Stack]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (mean %.0f%%)", res.Stack, 100*res.MeanUse), l)
	}
	capacity, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(sc.Cluster.GPUs())}, {X: p.X.Max, Y: float64(sc.Cluster.GPUs())}})
	if err != nil {
		return nil, err
	}
	capacity.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(capacity)
	p.Legend.Add("cluster", capacity)
	return p, nil
}

// waitPlot shows each kind's waits per stack as box plots.
func waitPlot(sc evaluate.Scenario, results []evaluate.Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: queue wait per kind (job creation to its last pod's start)", sc.Name)
	p.Y.Label.Text = "seconds"
	var labels []string
	x := 0.0
	for _, k := range evaluate.Kinds {
		for _, res := range results {
			if res.Skipped != "" {
				continue
			}
			ws := plotter.Values(res.WaitSamples[string(k)])
			labels = append(labels, string(k)+" "+res.Stack)
			if len(ws) == 0 {
				x++
				continue
			}
			b, err := plotter.NewBoxPlot(vg.Points(14), x, ws)
			if err != nil {
				return nil, err
			}
			b.FillColor = stackColors[res.Stack]
			p.Add(b)
			x++
		}
	}
	if len(labels) == 0 {
		return nil, errors.New("no stack ran")
	}
	p.NominalX(labels...)
	return p, nil
}

// teamPlot draws one stack's teams' GPUs over time.
func teamPlot(sc evaluate.Scenario, res evaluate.Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on %s: GPUs per team (Jain %.2f)", sc.Name, res.Stack, res.Jain)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "GPUs"
	p.Y.Min = 0
	p.Legend.Top = true
	end := 0.0
	if n := len(res.Equivalent); n > 0 {
		end = res.Equivalent[n-1].T
	}
	for i, t := range sc.Teams {
		l, err := plotter.NewLine(stepLine(res.TeamUse[t.Name], end))
		if err != nil {
			return nil, err
		}
		l.Color = teamColors[i%len(teamColors)]
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d guaranteed)", t.Name, t.GPUs), l)
	}
	return p, nil
}

// writeHTML writes report.html: the tables of report.md and the plots,
// self-contained (images inline, no script, no network).
func (r *report) writeHTML(dir string) error {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>Rota evaluation</title><style>
body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}
.row{display:flex;gap:8px;flex-wrap:wrap}.row img{max-width:32%}pre{white-space:pre-wrap}</style></head><body>`)
	b.WriteString(markdownToHTML(r.markdownHeader()))
	for _, sc := range r.Scenarios {
		results := r.resultsOf(sc.Name)
		fmt.Fprintf(&b, "<h2>%s: %s</h2>", html.EscapeString(sc.Name), html.EscapeString(sc.About))
		if p, err := allocationPlot(sc, results); err == nil {
			if img, err := png(p, 22*vg.Centimeter, 9*vg.Centimeter); err == nil {
				fmt.Fprintf(&b, `<img alt="allocation %s" src="data:image/png;base64,%s">`, sc.Name, img)
			}
		}
		if p, err := waitPlot(sc, results); err == nil {
			if img, err := png(p, 22*vg.Centimeter, 9*vg.Centimeter); err == nil {
				fmt.Fprintf(&b, `<img alt="waits %s" src="data:image/png;base64,%s">`, sc.Name, img)
			}
		}
		b.WriteString(`<div class="row">`)
		for _, res := range results {
			if res.Skipped != "" {
				continue
			}
			if p, err := teamPlot(sc, res); err == nil {
				if img, err := png(p, 12*vg.Centimeter, 8*vg.Centimeter); err == nil {
					fmt.Fprintf(&b, `<img alt="teams %s %s" src="data:image/png;base64,%s">`, sc.Name, res.Stack, img)
				}
			}
		}
		b.WriteString(`</div>`)
		b.WriteString(markdownToHTML(r.scenarioMarkdown(sc)))
	}
	b.WriteString("</body></html>\n")
	return os.WriteFile(filepath.Join(dir, "report.html"), []byte(b.String()), 0o644)
}

// markdownToHTML renders the few Markdown forms the report uses: headings,
// tables, bullets and paragraphs (with `code` and **bold**).
func markdownToHTML(md string) string {
	var b strings.Builder
	inline := func(s string) string {
		s = html.EscapeString(s)
		for _, m := range []struct{ mark, open, close string }{{"**", "<b>", "</b>"}, {"`", "<code>", "</code>"}} {
			for strings.Count(s, m.mark) >= 2 {
				s = strings.Replace(s, m.mark, m.open, 1)
				s = strings.Replace(s, m.mark, m.close, 1)
			}
		}
		return s
	}
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "## "):
			// Scenario headings are written by writeHTML above the plots.
		case strings.HasPrefix(l, "# "):
			fmt.Fprintf(&b, "<h1>%s</h1>", inline(l[2:]))
		case strings.HasPrefix(l, "|"):
			b.WriteString("<table>")
			for first := true; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				cells := strings.Split(strings.Trim(lines[i], "|"), "|")
				if strings.HasPrefix(cells[0], "---") {
					continue
				}
				tag := "td"
				if first {
					tag, first = "th", false
				}
				b.WriteString("<tr>")
				for _, c := range cells {
					fmt.Fprintf(&b, "<%s>%s</%s>", tag, inline(strings.TrimSpace(c)), tag)
				}
				b.WriteString("</tr>")
			}
			i--
			b.WriteString("</table>")
		case strings.HasPrefix(l, "- "):
			b.WriteString("<ul>")
			for ; i < len(lines) && strings.HasPrefix(lines[i], "- "); i++ {
				fmt.Fprintf(&b, "<li>%s</li>", inline(lines[i][2:]))
			}
			i--
			b.WriteString("</ul>")
		case strings.TrimSpace(l) != "":
			fmt.Fprintf(&b, "<p>%s</p>", inline(l))
		}
	}
	return b.String()
}
