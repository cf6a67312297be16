package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/rota-sched/rota/hack/images/oci"
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

// writeImageArchive writes an image archive (hack/images/oci, on
// go-containerregistry: the `docker save` layout that `ctr images import`
// reads) holding the images of specs, which share one layer with the
// single file binary at /<imageBinary>; the archive stores it once.
func writeImageArchive(path string, binary []byte, specs []imageSpec) error {
	layer := oci.Layer{
		Files:     []oci.File{{Path: "/" + imageBinary, Data: binary, Mode: 0o755}},
		CreatedBy: "test/realnode: " + imageBinary,
	}
	images := map[string]v1.Image{}
	for _, s := range specs {
		img, err := oci.Image(oci.Spec{
			Layers:       []oci.Layer{layer},
			Entrypoint:   s.entrypoint,
			Env:          []string{"PATH=/"},
			WorkingDir:   "/",
			Created:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Architecture: runtime.GOARCH,
		})
		if err != nil {
			return fmt.Errorf("image %s: %w", s.tag, err)
		}
		images[s.tag] = img
	}
	return oci.WriteArchive(path, images)
}
