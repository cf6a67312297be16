package realnode

import (
	"archive/tar"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteImageArchive reads the archive back as `ctr images import`
// does (by tag): each tag's entrypoint runs the one binary, whose layer is
// stored once and holds exactly /rota-realnode-image, executable.
func TestWriteImageArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images.tar")
	binary := []byte("#!binary")
	if err := writeImageArchive(path, binary, imageSpecs()); err != nil {
		t.Fatal(err)
	}
	var layerDigests []v1.Hash
	for _, spec := range imageSpecs() {
		tag, err := name.NewTag(spec.tag)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", spec.tag, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Config.Entrypoint, spec.entrypoint) || cfg.Config.Entrypoint[0] != "/"+imageBinary {
			t.Errorf("%s entrypoint %v, want %v", spec.tag, cfg.Config.Entrypoint, spec.entrypoint)
		}
		if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
			t.Errorf("%s platform %s/%s", spec.tag, cfg.OS, cfg.Architecture)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %v (%v), want one", spec.tag, layers, err)
		}
		d, _ := layers[0].Digest()
		layerDigests = append(layerDigests, d)
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		h, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Name != imageBinary || h.Mode != 0o755 || string(data) != string(binary) {
			t.Errorf("%s: layer entry %s mode %o %q", spec.tag, h.Name, h.Mode, data)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Errorf("%s: more than one entry in the layer (%v)", spec.tag, err)
		}
		rc.Close()
	}
	if len(layerDigests) != 2 || layerDigests[0] != layerDigests[1] {
		t.Errorf("layer digests %v: want one layer shared", layerDigests)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layerFiles := 0
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, ".tar.gz") {
			layerFiles++
		}
	}
	if layerFiles != 1 {
		t.Errorf("the archive stores %d layer files, want 1", layerFiles)
	}
}

func TestParseEnv(t *testing.T) {
	env, complete := parseEnv("A=1\nNVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b\nX=y=z\n" + ReadyLine + "\nLATE=1\n")
	if !complete {
		t.Error("complete = false")
	}
	want := map[string]string{"A": "1", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "X": "y=z"}
	if !maps.Equal(want, env) {
		t.Errorf("parseEnv = %v, want %v", env, want)
	}
	if _, complete := parseEnv("A=1\n"); complete {
		t.Error("complete = true without the ready line")
	}
}

func TestSplitRule(t *testing.T) {
	got := splitRule(`KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -j DROP`)
	want := []string{"KUBE-FIREWALL", "-m", "comment", "--comment", "block incoming localnet connections", "-j", "DROP"}
	if !slices.Equal(want, got) {
		t.Errorf("splitRule = %q, want %q", got, want)
	}
}
