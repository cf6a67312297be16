package realnode

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteImageArchive checks the docker-archive layout `ctr images
// import` reads: a manifest naming each tag's config and the shared layer,
// whose sha256 is the configs' diff_id.
func TestWriteImageArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images.tar")
	if err := writeImageArchive(path, []byte("#!binary"), imageSpecs()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, m := range manifest {
		tags = append(tags, m.RepoTags...)
		if len(m.Layers) != 1 {
			t.Fatalf("%v: layers %v, want one", m.RepoTags, m.Layers)
		}
		sum := sha256.Sum256(files[m.Layers[0]])
		var cfg struct {
			Config struct{ Entrypoint []string }
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		}
		if err := json.Unmarshal(files[m.Config], &cfg); err != nil {
			t.Fatal(err)
		}
		if want := []string{"sha256:" + hex.EncodeToString(sum[:])}; !slices.Equal(want, cfg.RootFS.DiffIDs) {
			t.Errorf("%v diff_ids = %v, want %v", m.RepoTags, cfg.RootFS.DiffIDs, want)
		}
		if len(cfg.Config.Entrypoint) == 0 || cfg.Config.Entrypoint[0] != "/"+imageBinary {
			t.Errorf("%v entrypoint %v", m.RepoTags, cfg.Config.Entrypoint)
		}
	}
	if want := []string{PauseImage, WorkloadImage}; !slices.Equal(want, tags) {
		t.Errorf("tags = %v, want %v", tags, want)
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
