// Package oci assembles container images from files and writes them as
// image archives, with github.com/google/go-containerregistry doing the
// image format: manifests, configs, digests, layer compression and the
// archive layout (`docker save`'s, which `docker load`, `ctr images
// import`, `podman load` and `skopeo copy docker-archive:` read). This
// package only writes the layers' tar entries (root-owned, one fixed
// modification time, parents before children, sorted), so the same files
// give the same image digest on every build.
//
// It is shared by the image builder (hack/images, `make images`) and the
// real-node suite's test images (test/realnode).
package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer.
type File struct {
	// Path is absolute in the image: /rota-extender, /etc/passwd.
	Path string
	// Data is a regular file's content.
	Data []byte
	// Mode holds the permission bits (0o755 for a program); zero means
	// 0o644 for a file, 0o755 for a folder.
	Mode int64
	// Link makes the entry a symbolic link to Link.
	Link string
	// Dir makes the entry a folder.
	Dir bool
}

// Layer is one layer of an image and the history line that names it.
type Layer struct {
	Files     []File
	CreatedBy string
}

// Spec describes an image built from scratch: no base image, only the
// layers given.
type Spec struct {
	Layers     []Layer
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User is "uid:gid" (or a name of the image's /etc/passwd).
	User       string
	WorkingDir string
	Labels     map[string]string
	// Created is the image's creation time and every file's modification
	// time; the zero time means the Unix epoch.
	Created time.Time
	// Architecture is a GOARCH value; the image's OS is linux.
	Architecture string
}

// Image builds the image of s with OCI media types.
func Image(s Spec) (v1.Image, error) {
	if s.Architecture == "" {
		return nil, errors.New("oci: no architecture")
	}
	if len(s.Layers) == 0 {
		return nil, errors.New("oci: an image needs at least one layer")
	}
	created := s.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, l := range s.Layers {
		layer, err := NewLayer(l.Files, created)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, l.CreatedBy, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: l.CreatedBy},
		}); err != nil {
			return nil, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture = s.Architecture
	cfg.OS = "linux"
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		Env:        s.Env,
		User:       s.User,
		WorkingDir: s.WorkingDir,
		Labels:     s.Labels,
	}
	return mutate.ConfigFile(img, cfg)
}

// NewLayer returns a layer holding files, with a folder entry for every
// parent folder not listed, all owned by root and modified at modTime.
// Entries are sorted by path; a path given twice is an error.
func NewLayer(files []File, modTime time.Time) (v1.Layer, error) {
	entries := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || p == "/" {
			return nil, fmt.Errorf("oci: path %q is not an absolute file path", f.Path)
		}
		if _, dup := entries[p]; dup {
			return nil, fmt.Errorf("oci: %s given twice", p)
		}
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true}
			}
		}
	}
	for p := range entries {
		if d := path.Dir(p); d != "/" && !entries[d].Dir {
			return nil, fmt.Errorf("oci: %s is inside %s, which is not a folder", p, d)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(entries)) {
		f := entries[p]
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			ModTime: modTime,
			Mode:    f.Mode,
			Uname:   "root",
			Gname:   "root",
			Format:  tar.FormatPAX,
		}
		switch {
		case f.Dir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
		case f.Link != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = f.Link
			hdr.Mode = 0o777
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.Data))
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteArchive writes the images, by tag ("rota-extender:0.1.0",
// "registry.example/rota-extender:0.1.0"), into one archive at path.
// Images sharing layers store them once.
func WriteArchive(path string, images map[string]v1.Image) error {
	refs := map[name.Reference]v1.Image{}
	for tag, img := range images {
		t, err := name.NewTag(tag)
		if err != nil {
			return fmt.Errorf("oci: image tag %q: %w", tag, err)
		}
		refs[t] = img
	}
	return tarball.MultiRefWriteToFile(path, refs)
}
