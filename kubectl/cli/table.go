package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// color is an ANSI SGR colour; "" is none.
type color string

const (
	plain  color = ""
	red    color = "31"
	yellow color = "33"
	green  color = "32"
	bold   color = "1"
)

// printer writes a report in the chosen format.
type printer struct {
	out    io.Writer
	format string
	color  bool
}

func newPrinter(env Env, o options) *printer {
	on := false
	switch o.color {
	case "always":
		on = true
	case "auto":
		// https://no-color.org: any non-empty NO_COLOR disables colour.
		on = env.Terminal != nil && env.Terminal() && env.Getenv("NO_COLOR") == ""
	}
	return &printer{out: env.Stdout, format: o.output, color: on}
}

// print writes v as JSON or YAML, or calls text for the table form.
func (p *printer) print(v any, text func(io.Writer) error) error {
	switch p.format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		_, err = p.out.Write(append(data, '\n'))
		return err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = p.out.Write(data)
		return err
	}
	return text(p.out)
}

// paint wraps s in colour c when colour is on.
func (p *printer) paint(c color, s string) string {
	if !p.color || c == plain || s == "" {
		return s
	}
	return "\x1b[" + string(c) + "m" + s + "\x1b[0m"
}

// table collects rows and writes them aligned (text/tabwriter), colouring
// whole rows after alignment so escape codes do not skew the columns.
type table struct {
	rows   [][]string
	colors []color
	// noHeader: the first row is data, not a bold header.
	noHeader bool
}

func (t *table) row(c color, cells ...string) {
	t.rows = append(t.rows, cells)
	t.colors = append(t.colors, c)
}

func (t *table) write(w io.Writer, p *printer, indent string) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	for _, r := range t.rows {
		for i, cell := range r {
			if cell == "" {
				cell = "-"
			}
			r[i] = strings.ReplaceAll(cell, "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for i, l := range lines {
		c := t.colors[i]
		if i == 0 && !t.noHeader {
			c = bold
		}
		if _, err := fmt.Fprintln(w, indent+p.paint(c, strings.TrimRight(l, " "))); err != nil {
			return err
		}
	}
	return nil
}
