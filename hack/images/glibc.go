package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/rota-sched/rota/hack/images/oci"
)

// nvmlNeeds are the libraries libnvidia-ml.so.1 itself links against
// besides libc (its DT_NEEDED entries in the 5xx drivers). The driver's
// library comes from the host at run time, these come with the image. On
// glibc 2.34 and later they are small stubs whose symbols live in libc.
var nvmlNeeds = []string{"libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"}

// triplets are the Debian multiarch folder names by GOARCH.
var triplets = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// interpreter returns the ELF program interpreter of bin (the dynamic
// loader, /lib64/ld-linux-x86-64.so.2), or "" for a static binary.
func interpreter(bin string) (string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("%s: reading the interpreter: %w", bin, err)
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", nil
}

// libraryDirs are where this machine's glibc lives, for its architecture.
func libraryDirs() ([]string, string, error) {
	t, ok := triplets[runtime.GOARCH]
	if !ok {
		return nil, "", fmt.Errorf("no library folder known for GOARCH %s", runtime.GOARCH)
	}
	return []string{"/lib/" + t, "/usr/lib/" + t, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}, t, nil
}

// glibcLayer returns a layer with the dynamic loader and the shared
// libraries bin needs (the closure of DT_NEEDED, with nvmlNeeds added),
// copied from this machine: the same glibc bin was linked against, so
// every symbol version it asks for is there. Libraries go to
// /usr/lib/<triplet> (where the loader looks by default, and where the
// NVIDIA container toolkit puts the driver's); /lib is a link to usr/lib
// and the interpreter's path a link to the loader. The second result is
// the glibc version ("2.36").
func glibcLayer(bin string) (oci.Layer, string, error) {
	dirs, triplet, err := libraryDirs()
	if err != nil {
		return oci.Layer{}, "", err
	}
	return libraryLayer(bin, dirs, triplet)
}

func libraryLayer(bin string, dirs []string, triplet string) (oci.Layer, string, error) {
	interp, err := interpreter(bin)
	if err != nil {
		return oci.Layer{}, "", err
	}
	if interp == "" {
		return oci.Layer{}, "", fmt.Errorf("%s is static: no libraries to add", bin)
	}
	f, err := elf.Open(bin)
	if err != nil {
		return oci.Layer{}, "", err
	}
	needed, err := f.ImportedLibraries()
	f.Close()
	if err != nil {
		return oci.Layer{}, "", fmt.Errorf("%s: %w", bin, err)
	}
	libDir := "/usr/lib/" + triplet
	found := map[string]string{} // soname -> host path
	queue := append(append([]string{path.Base(interp)}, needed...), nvmlNeeds...)
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		if _, ok := found[lib]; ok {
			continue
		}
		host, err := findLibrary(lib, dirs)
		if err != nil {
			return oci.Layer{}, "", err
		}
		found[lib] = host
		lf, err := elf.Open(host)
		if err != nil {
			return oci.Layer{}, "", fmt.Errorf("%s: %w", host, err)
		}
		deps, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return oci.Layer{}, "", fmt.Errorf("%s: %w", host, err)
		}
		queue = append(queue, deps...)
	}
	files := []oci.File{{Path: "/lib", Link: "usr/lib"}}
	for _, lib := range slices.Sorted(maps.Keys(found)) {
		data, err := os.ReadFile(found[lib])
		if err != nil {
			return oci.Layer{}, "", err
		}
		files = append(files, oci.File{Path: libDir + "/" + lib, Data: data, Mode: 0o755})
	}
	// The interpreter's own path, through the /lib link where it is under /lib.
	interpPath := interp
	if rest, ok := strings.CutPrefix(interp, "/lib/"); ok {
		interpPath = "/usr/lib/" + rest
	}
	if interpPath != libDir+"/"+path.Base(interp) {
		files = append(files, oci.File{Path: interpPath, Link: libDir + "/" + path.Base(interp)})
	}
	version, err := glibcVersion(found["libc.so.6"])
	if err != nil {
		return oci.Layer{}, "", err
	}
	return oci.Layer{Files: files, CreatedBy: "hack/images: glibc " + version + " from the build machine"}, version, nil
}

func findLibrary(name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() {
			return real, nil
		}
	}
	return "", fmt.Errorf("shared library %s not found in %s (install libc6)", name, strings.Join(dirs, ", "))
}

var glibcRelease = regexp.MustCompile(`GNU C Library \([^)]*\) (?:stable )?release version (\d+\.\d+)`)

// glibcVersion reads the release banner glibc carries in libc.so.6.
func glibcVersion(libc string) (string, error) {
	if libc == "" {
		return "", errors.New("libc.so.6 is not among the libraries")
	}
	data, err := os.ReadFile(libc)
	if err != nil {
		return "", err
	}
	m := glibcRelease.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s: no glibc release banner", libc)
	}
	return string(m[1]), nil
}
