// Command images builds Rota's container images as image archives without
// a container engine (`make images`): one tarball per image in --out, which
// `docker load -i`, `ctr images import`, `podman load -i` and
// `skopeo copy docker-archive:FILE docker://REGISTRY/NAME:TAG` read.
//
// Images (tags as charts/rota expects them with image.registry and
// image.repository at --registry and --repository):
//
//	rota-extender:VERSION        static binary /rota-extender
//	rota-admission:VERSION       static binary /rota-admission
//	rota-device-plugin:VERSION   /rota-device-plugin, built with cgo, and the
//	                             glibc files it and libnvidia-ml.so.1 need
//	rota-kube-scheduler:KUBE     the kube-scheduler of .cache/k8s/bin at
//	                             /usr/local/bin (make k8s-tools), for a cluster
//	                             without registry access, and the install tests
//
// Each image is built from scratch: a base layer with /etc/passwd and
// /etc/group (root and nonroot, 65532), /tmp; a layer with the program;
// the device plugin adds one layer of glibc. They run as 65532:65532 (the
// chart's pods set the same user; the device plugin's pod runs as root to
// create its socket in the kubelet's folder). No CA bundle: every TLS peer
// of Rota and kube-scheduler (the API server, the extender) is checked
// against the cluster's own CAs, mounted by the pods. Labels: the
// org.opencontainers.image.* keys title, description, version, source,
// revision (the git commit, with -dirty when tracked files differ from
// it), created. Files, times and digests are the same on every build of
// the same source: times come from the commit (or SOURCE_DATE_EPOCH). The
// table printed at the end names each image's ID (its config's digest,
// what `docker images` shows).
//
// It lives in hack/ and not cmd/ because it is a build tool, not a program
// Rota ships: `make build` (./cmd/...) and the release binaries leave it out.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/hack/images/oci"
)

// Source is the org.opencontainers.image.source label.
const Source = "https://github.com/rota-sched/rota"

// imageEnvPATH is every image's PATH.
const imageEnvPATH = "PATH=/usr/local/bin:/usr/bin:/bin"

// NonRoot is the images' user and group (distroless' "nonroot").
const NonRoot = "65532:65532"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

type options struct {
	out, version, revision, registry, repository, kubeBin, only string
	created                                                     time.Time
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.out, "out", "bin/images", "folder for the archives")
	fs.StringVar(&o.version, "version", "", "image tag and version label (default: charts/rota's appVersion)")
	fs.StringVar(&o.revision, "revision", "", "revision label (default: git rev-parse HEAD)")
	fs.StringVar(&o.registry, "registry", "", "registry host (and path) of the tags, as the chart's image.registry")
	fs.StringVar(&o.repository, "repository", "rota", "name prefix of the tags, as the chart's image.repository")
	fs.StringVar(&o.kubeBin, "kube-bin", ".cache/k8s/bin", "folder with the kube-scheduler binary (make k8s-tools)")
	fs.StringVar(&o.only, "only", "", "comma-separated subset: extender,admission,device-plugin,kube-scheduler")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if o.version == "" {
		if o.version, err = chartAppVersion(filepath.Join(root, "charts", "rota", "Chart.yaml")); err != nil {
			return err
		}
	}
	if o.revision == "" {
		o.revision = gitOutput(ctx, root, "rev-parse", "HEAD")
		// Tracked files that differ from the commit: the images are not
		// the commit's.
		if o.revision != "" && gitOutput(ctx, root, "status", "--porcelain", "--untracked-files=no") != "" {
			o.revision += "-dirty"
		}
	}
	o.created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		o.created = time.Unix(sec, 0).UTC()
	} else if s := gitOutput(ctx, root, "log", "-1", "--format=%ct"); s != "" {
		if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
			o.created = time.Unix(sec, 0).UTC()
		}
	}
	if !filepath.IsAbs(o.kubeBin) {
		o.kubeBin = filepath.Join(root, o.kubeBin)
	}
	defs, err := selectImages(definitions(o), o.only)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "rota-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ARCHIVE\tTAG\tID\tLAYERS\tCOMPRESSED\tFILES")
	for _, d := range defs {
		img, tag, err := d.build(ctx, root, work, o)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		archive := filepath.Join(o.out, d.name+".tar")
		if err := oci.WriteArchive(archive, map[string]v1.Image{tag: img}); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		layers, compressed, files, err := sizes(img)
		if err != nil {
			return err
		}
		id, err := img.ConfigName()
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", archive, tag, id.Hex[:12], layers, mib(compressed), mib(files))
	}
	return tw.Flush()
}

// image is one image the builder makes.
type image struct {
	name        string // archive name and, after the repository prefix, tag name
	short       string // --only key
	description string
	// pkg is the Go package of the program; prebuilt a binary used as is.
	pkg, prebuilt string
	cgo           bool
	// path of the program in the image.
	path string
	env  []string
	tag  string
	// version overrides the options' version (kube-scheduler's own).
	version string
}

func definitions(o options) []image {
	prefix := o.repository
	if o.registry != "" {
		prefix = strings.TrimSuffix(o.registry, "/") + "/" + prefix
	}
	kubeVersion := kubeSchedulerVersion(filepath.Join(o.kubeBin, "kube-scheduler"))
	return []image{
		{name: "rota-extender", short: "extender", pkg: "./extender/cmd/rota-extender", path: "/rota-extender",
			description: "Rota's kube-scheduler extender: GPU placement, gangs, queue, remediation",
			tag:         prefix + "-extender:" + o.version},
		{name: "rota-admission", short: "admission", pkg: "./admission/cmd/rota-admission", path: "/rota-admission",
			description: "Rota's admission webhook: team quota and the queue gate",
			tag:         prefix + "-admission:" + o.version},
		{name: "rota-device-plugin", short: "device-plugin", pkg: "./deviceplugin/cmd/rota-device-plugin",
			path: "/rota-device-plugin", cgo: true,
			description: "Rota's kubelet device plugin; loads the host driver's libnvidia-ml.so.1 at run time",
			// The NVIDIA container toolkit injects the driver's libraries
			// (into /usr/lib/<triplet>, on the loader's default path) when
			// NVIDIA_VISIBLE_DEVICES is set and the capabilities name
			// utility; a driver folder mounted by hand goes at
			// /usr/local/nvidia/lib64 (as GKE's driver installer does).
			env: []string{"NVIDIA_DRIVER_CAPABILITIES=utility", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"},
			tag: prefix + "-device-plugin:" + o.version},
		{name: "rota-kube-scheduler", short: "kube-scheduler", prebuilt: filepath.Join(o.kubeBin, "kube-scheduler"),
			path:        "/usr/local/bin/kube-scheduler",
			description: "kube-scheduler " + kubeVersion + " built from the Kubernetes module (hack/k8s-tools.sh)",
			tag:         prefix + "-kube-scheduler:" + kubeVersion, version: kubeVersion},
	}
}

func selectImages(all []image, only string) ([]image, error) {
	if only == "" {
		return all, nil
	}
	var out []image
	for _, s := range strings.Split(only, ",") {
		found := false
		for _, d := range all {
			if d.short == strings.TrimSpace(s) {
				out = append(out, d)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--only: no image %q (extender, admission, device-plugin, kube-scheduler)", s)
		}
	}
	return out, nil
}

func (d image) build(ctx context.Context, root, work string, o options) (v1.Image, string, error) {
	bin := d.prebuilt
	if d.pkg != "" {
		bin = filepath.Join(work, d.name)
		if err := goBuild(ctx, root, d.pkg, bin, d.cgo, o.version, o.revision); err != nil {
			return nil, "", err
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", fmt.Errorf("%w (run make k8s-tools for kube-scheduler)", err)
	}
	interp, err := interpreter(bin)
	if err != nil {
		return nil, "", err
	}
	layers := []oci.Layer{baseLayer(), {
		Files:     []oci.File{{Path: d.path, Data: data, Mode: 0o755}},
		CreatedBy: "hack/images: " + d.path,
	}}
	labels := map[string]string{}
	if interp != "" {
		if !d.cgo {
			return nil, "", fmt.Errorf("%s is dynamically linked (%s); want a static binary", bin, interp)
		}
		libs, version, err := glibcLayer(bin)
		if err != nil {
			return nil, "", err
		}
		layers = append(layers, libs)
		labels["io.github.rota-sched.glibc"] = version
	}
	version := o.version
	if d.version != "" {
		version = d.version
	}
	labels["org.opencontainers.image.title"] = d.name
	labels["org.opencontainers.image.description"] = d.description
	labels["org.opencontainers.image.version"] = version
	labels["org.opencontainers.image.source"] = Source
	labels["org.opencontainers.image.created"] = o.created.Format(time.RFC3339)
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	img, err := oci.Image(oci.Spec{
		Layers:       layers,
		Entrypoint:   []string{d.path},
		Env:          append([]string{imageEnvPATH}, d.env...),
		User:         NonRoot,
		WorkingDir:   "/",
		Labels:       labels,
		Created:      o.created,
		Architecture: runtime.GOARCH,
	})
	return img, d.tag, err
}

// baseLayer is what every image starts from: the users, groups and /tmp.
func baseLayer() oci.Layer {
	return oci.Layer{CreatedBy: "hack/images: base (passwd, group, tmp)", Files: []oci.File{
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}}
}

// goBuild builds pkg for linux on this machine's architecture: static
// (CGO_ENABLED=0) unless cgo, stripped, without file paths, with the
// version and revision stamped (pkg/version), as the image's labels say.
func goBuild(ctx context.Context, root, pkg, out string, cgo bool, version, revision string) error {
	ldflags := "-s -w -X github.com/rota-sched/rota/pkg/version.Version=" + version
	if revision != "" {
		ldflags += " -X github.com/rota-sched/rota/pkg/version.revision=" + revision
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", out, pkg)
	cmd.Dir = root
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), cgoEnv, "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.HasPrefix(string(b), "module github.com/rota-sched/rota\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/rota-sched/rota above %s", dir)
		}
		dir = parent
	}
}

func chartAppVersion(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if chart.AppVersion == "" {
		return "", fmt.Errorf("%s has no appVersion", path)
	}
	return chart.AppVersion, nil
}

// kubeSchedulerVersion is what the binary reports ("v1.37.2"), or
// "unknown" when it cannot run (the build then fails reading it).
func kubeSchedulerVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "unknown"
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	if !ok || v == "" {
		return "unknown"
	}
	return v
}

func gitOutput(ctx context.Context, dir string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// sizes returns the layer count, the compressed size (what a registry
// stores and a node pulls) and the files' size (uncompressed layers).
func sizes(img v1.Image) (layers int, compressed, files int64, err error) {
	ls, err := img.Layers()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, l := range ls {
		n, err := l.Size()
		if err != nil {
			return 0, 0, 0, err
		}
		compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, 0, err
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, 0, err
		}
		files += u
	}
	return len(ls), compressed, files, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
