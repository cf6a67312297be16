package main

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/hack/images/oci"
)

// TestLibraryLayer collects the glibc files of a dynamically linked
// program of this machine (env links libc only): the loader, libc, the
// libraries libnvidia-ml.so.1 needs, the /lib link and the interpreter's
// path as a link to the loader, which must exist in the layer.
func TestLibraryLayer(t *testing.T) {
	dirs, triplet, err := libraryDirs()
	if err != nil {
		t.Skip(err)
	}
	bin := "/usr/bin/env"
	interp, err := interpreter(bin)
	if err != nil || interp == "" {
		t.Skipf("%s is not a dynamically linked ELF program here (%v)", bin, err)
	}
	layer, version, err := libraryLayer(bin, dirs, triplet)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d+\.\d+$`).MatchString(version) {
		t.Errorf("glibc version %q", version)
	}
	byPath := map[string]oci.File{}
	for _, f := range layer.Files {
		byPath[f.Path] = f
	}
	libDir := "/usr/lib/" + triplet
	for _, lib := range append([]string{"libc.so.6", path.Base(interp)}, nvmlNeeds...) {
		f, ok := byPath[libDir+"/"+lib]
		if !ok {
			t.Errorf("%s/%s missing; layer has %v", libDir, lib, slices.Sorted(mapsKeys(byPath)))
			continue
		}
		if len(f.Data) == 0 || !bytes.HasPrefix(f.Data, []byte("\x7fELF")) || f.Mode != 0o755 {
			t.Errorf("%s: %d bytes, mode %o; want an ELF file 0755", f.Path, len(f.Data), f.Mode)
		}
	}
	if byPath["/lib"].Link != "usr/lib" {
		t.Errorf("/lib = %+v, want a link to usr/lib", byPath["/lib"])
	}
	// The kernel starts the loader at the interpreter's path, through the
	// /lib link when it is under /lib.
	resolved := interp
	if rest, ok := strings.CutPrefix(interp, "/lib/"); ok {
		resolved = "/usr/lib/" + rest
	}
	if f, ok := byPath[resolved]; ok && f.Link != "" {
		resolved = f.Link
	}
	if f, ok := byPath[resolved]; !ok || len(f.Data) == 0 {
		t.Errorf("interpreter %s resolves to %s, which is not a file of the layer", interp, resolved)
	}
	if _, err := oci.NewLayer(layer.Files, testTime); err != nil {
		t.Errorf("the files do not make a layer: %v", err)
	}
	if _, _, err := libraryLayer(bin, []string{t.TempDir()}, triplet); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("no library folder: err = %v, want not found", err)
	}
}

func mapsKeys(m map[string]oci.File) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestChartUsesTheImages checks deploy/rota.yaml (the chart's default
// rendering, kept equal to charts/rota by test/chart) against what the
// builder makes: every Rota container names a tag the builder writes, the
// pods' users are the images' user (or root for the device plugin, which
// creates its socket in the kubelet's folder), and the scheduler's command
// resolves on the kube-scheduler image's PATH.
func TestChartUsesTheImages(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := chartAppVersion(filepath.Join(root, "charts", "rota", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defs := definitions(options{version: version, repository: "rota", kubeBin: t.TempDir()})
	tags := map[string]image{}
	for _, d := range defs {
		tags[d.tag] = d
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "rota.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	uid, _, _ := strings.Cut(NonRoot, ":")
	seen := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						SecurityContext struct{ RunAsUser *int64 }
						Containers      []struct {
							Name, Image     string
							Command         []string
							SecurityContext struct{ RunAsUser *int64 }
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Deployment" && obj.Kind != "DaemonSet" {
			continue
		}
		pod := obj.Spec.Template.Spec
		for _, c := range pod.Containers {
			user := pod.SecurityContext.RunAsUser
			if c.SecurityContext.RunAsUser != nil {
				user = c.SecurityContext.RunAsUser
			}
			if user == nil {
				t.Errorf("%s: no runAsUser", c.Name)
			}
			if strings.HasPrefix(c.Image, "registry.k8s.io/kube-scheduler:") {
				// The upstream image, or the builder's rota-kube-scheduler.
				sched := defs[len(defs)-1]
				dir, base := path.Split(sched.path)
				if len(c.Command) == 0 || c.Command[0] != base || !slices.Contains(
					strings.Split(strings.TrimPrefix(imageEnvPATH, "PATH="), ":"), path.Clean(dir)) {
					t.Errorf("scheduler command %q does not resolve to %s on %s", c.Command, sched.path, imageEnvPATH)
				}
				seen["kube-scheduler"] = true
				continue
			}
			d, ok := tags[c.Image]
			if !ok {
				t.Errorf("%s: image %s is none the builder writes", c.Name, c.Image)
				continue
			}
			seen[d.short] = true
			if len(c.Command) > 0 {
				t.Errorf("%s: command %q overrides the image's entrypoint %s", c.Name, c.Command, d.path)
			}
			if user != nil && !(*user == 0 && d.short == "device-plugin") && uid != strconv.FormatInt(*user, 10) {
				t.Errorf("%s: runs as %d, the image as %s", c.Name, *user, NonRoot)
			}
		}
	}
	for _, d := range defs {
		if !seen[d.short] {
			t.Errorf("deploy/rota.yaml runs no %s", d.name)
		}
	}
}

func TestSelectImages(t *testing.T) {
	defs := definitions(options{version: "1.0.0", repository: "rota", registry: "reg.example/team/", kubeBin: t.TempDir()})
	got, err := selectImages(defs, "admission, device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, d := range got {
		tags = append(tags, d.tag)
	}
	if want := []string{"reg.example/team/rota-admission:1.0.0", "reg.example/team/rota-device-plugin:1.0.0"}; !slices.Equal(tags, want) {
		t.Errorf("tags %v, want %v", tags, want)
	}
	if _, err := selectImages(defs, "extender,scheduler"); err == nil || !strings.Contains(err.Error(), `"scheduler"`) {
		t.Errorf("unknown name: err = %v", err)
	}
}

var testTime = time.Unix(0, 0)
