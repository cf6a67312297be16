package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// Images the harness imports into containerd. Both hold one file,
// /rota-realnode-image (test/realnode/cmd/rota-realnode-image), and differ
// in its arguments. The tags are not ":latest", so the kubelet's default
// pull policy is IfNotPresent and it never looks for a registry.
const (
	PauseImage    = "rota.local/realnode-pause:1"
	WorkloadImage = "rota.local/realnode-workload:1"
	imageBinary   = "rota-realnode-image"
	imagePackage  = "github.com/rota-sched/rota/test/realnode/cmd/rota-realnode-image"
)

// ReadyLine is what a workload container prints after its environment.
const ReadyLine = "rota-realnode: ready"

// imageSpec is one image of the archive.
type imageSpec struct {
	tag        string
	entrypoint []string
}

func imageSpecs() []imageSpec {
	bin := "/" + imageBinary
	return []imageSpec{
		{tag: PauseImage, entrypoint: []string{bin, "pause"}},
		{tag: WorkloadImage, entrypoint: []string{bin, "env"}},
	}
}

// buildImageBinary compiles the image program statically into dir.
func buildImageBinary(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, imageBinary)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, imagePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", imagePackage, err, b)
	}
	return out, nil
}

// writeImageArchive writes a docker-archive tarball (the `docker save`
// layout that `ctr images import` reads: manifest.json, one config JSON
// per image, layer tarballs named by digest) holding the images of specs,
// which share one layer with the single file binary at /<base name>.
func writeImageArchive(path string, binary []byte, specs []imageSpec) error {
	layer, err := singleFileLayer(imageBinary, binary)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerDigest := hex.EncodeToString(layerSum[:])
	layerName := layerDigest + "/layer.tar"

	type manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifest []manifestEntry
	files := []struct {
		name string
		data []byte
	}{{layerName, layer}}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	for _, s := range specs {
		cfg := map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"created":      created,
			"config": map[string]any{
				"Entrypoint": s.entrypoint,
				"Env":        []string{"PATH=/"},
				"WorkingDir": "/",
			},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerDigest}},
			"history": []map[string]any{
				{"created": created, "created_by": "test/realnode: " + imageBinary},
			},
		}
		data, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		name := hex.EncodeToString(sum[:]) + ".json"
		files = append(files, struct {
			name string
			data []byte
		}{name, data})
		manifest = append(manifest, manifestEntry{Config: name, RepoTags: []string{s.tag}, Layers: []string{layerName}})
	}
	data, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	files = append(files, struct {
		name string
		data []byte
	}{"manifest.json", data})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: layerDigest + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		return err
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o600)
}

// singleFileLayer returns an uncompressed layer tarball with one
// executable file at its root.
func singleFileLayer(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg,
		ModTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
