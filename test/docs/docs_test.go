// Package docs checks the documentation against the code: every relative
// link resolves to a file and heading that exist, and the design doc's
// wire contract names every name pkg/contract defines.
package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/rota-sched/rota/pkg/contract"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// documents are the Markdown files people read, relative to the root.
func documents(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "deviceplugin/README.md", "cmd/rota-sim/README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		out = append(out, rel)
	}
	return out
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#+ (.+)$`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is GitHub's anchor of a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// TestLinks: every relative link in the documents names a file that
// exists and, with a #fragment, a heading of that file.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	for _, doc := range documents(t, root) {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(data), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join(root, doc)
			if file != "" {
				path = filepath.Join(filepath.Dir(path), file)
			}
			body, err := os.ReadFile(path)
			if err != nil {
				if _, serr := os.Stat(path); serr == nil {
					continue // a folder
				}
				t.Errorf("%s: link %q: %v", doc, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors(string(body))[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", doc, target, file, frag)
			}
		}
	}
}

// TestDesignNamesTheWireContract: docs/design.md's wire contract names
// every resource, label, annotation, condition and gate contract.Names
// defines for the default domain.
func TestDesignNamesTheWireContract(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	v := reflect.ValueOf(contract.Default)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Name == "Domain" || f.Type.Kind() != reflect.String {
			continue
		}
		name := v.Field(i).String()
		short := strings.TrimPrefix(name, contract.DefaultDomain)
		if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, "`<domain>"+short+"`") && !strings.Contains(text, "`"+strings.TrimPrefix(short, "/")+"`") {
			t.Errorf("docs/design.md does not name %s (contract.Names.%s); add it to the wire contract table", name, f.Name)
		}
	}
}
