package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// binaries are the mains whose flags operators set.
var binaries = map[string]string{
	"rota-extender":      "extender/cmd/rota-extender/main.go",
	"rota-admission":     "admission/cmd/rota-admission/main.go",
	"rota-device-plugin": "deviceplugin/cmd/rota-device-plugin/main.go",
}

// flagNames reads the names a main registers on its FlagSet (the second
// argument of every fs.XxxVar and fs.Xxx call with a string literal name).
func flagNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
			return true
		}
		arg := call.Args[0]
		if strings.HasSuffix(sel.Sel.Name, "Var") || sel.Sel.Name == "Func" || sel.Sel.Name == "BoolFunc" {
			arg = call.Args[1]
			if sel.Sel.Name == "Func" || sel.Sel.Name == "BoolFunc" {
				arg = call.Args[0]
			}
		}
		if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

// TestFlagNamesShared keeps one name per idea across the three binaries:
// the names kube-scheduler and kube-controller-manager use where they have
// one (component-base: --kubeconfig, --kube-api-qps, --leader-elect-*),
// Rota's own where they do not; and none of the names they replaced.
func TestFlagNamesShared(t *testing.T) {
	root := repoRoot(t)
	got := map[string][]string{}
	for bin, path := range binaries {
		got[bin] = flagNames(t, filepath.Join(root, path))
		if len(got[bin]) < 10 {
			t.Fatalf("%s: read only %d flags from %s; the reader is broken", bin, len(got[bin]), path)
		}
	}
	every := []string{"kubeconfig", "kube-api-qps", "kube-api-burst", "domain", "memory-unit-mib", "profiling"} // --version: pkg/version registers it for all three
	elected := []string{"leader-elect", "leader-elect-lease-duration", "leader-elect-renew-deadline",
		"leader-elect-retry-period", "leader-elect-resource-name", "leader-elect-resource-namespace",
		"quota-namespace", "quota-config-map", "quota-config-map-key", "listen", "tls-cert-file", "tls-key-file",
		"shutdown-timeout"}
	replaced := map[string]string{
		"kube-qps": "kube-api-qps", "kube-burst": "kube-api-burst", "api-qps": "kube-api-qps", "api-burst": "kube-api-burst",
		"lease-duration": "leader-elect-lease-duration", "renew-deadline": "leader-elect-renew-deadline",
		"retry-period": "leader-elect-retry-period", "lease-name": "leader-elect-resource-name",
		"leader-elect-name": "leader-elect-resource-name", "leader-elect-namespace": "leader-elect-resource-namespace",
		"namespace": "quota-namespace", "config-map": "quota-config-map", "config-map-key": "quota-config-map-key",
		"reservation-ttl": "bind-ttl (rota-extender) or in-flight-ttl (rota-admission)",
	}
	for bin, names := range got {
		want := every
		if bin != "rota-device-plugin" {
			want = append(slices.Clone(every), elected...)
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Errorf("%s has no --%s", bin, w)
			}
		}
		for _, n := range names {
			if instead, ok := replaced[n]; ok {
				t.Errorf("%s registers --%s; the shared name is --%s", bin, n, instead)
			}
		}
	}
}
