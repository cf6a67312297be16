package oci

import (
	"archive/tar"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testSpec() Spec {
	return Spec{
		Layers: []Layer{
			{CreatedBy: "base", Files: []File{
				{Path: "/etc/passwd", Data: []byte("nonroot:x:65532:65532::/:/sbin/nologin\n")},
				{Path: "/tmp", Dir: true, Mode: 0o1777},
			}},
			{CreatedBy: "program", Files: []File{
				{Path: "/usr/local/bin/prog", Data: []byte("\x7fELF"), Mode: 0o755},
				{Path: "/lib", Link: "usr/lib"},
			}},
		},
		Entrypoint:   []string{"/usr/local/bin/prog"},
		Env:          []string{"PATH=/usr/local/bin"},
		User:         "65532:65532",
		Labels:       map[string]string{"org.opencontainers.image.version": "1.2.3"},
		Created:      created,
		Architecture: "amd64",
	}
}

type entry struct {
	name     string
	typ      byte
	mode     int64
	link     string
	uid, gid int
	mtime    time.Time
	data     string
}

func layerEntries(t *testing.T, r io.Reader) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{h.Name, h.Typeflag, h.Mode, h.Linkname, h.Uid, h.Gid, h.ModTime.UTC(), string(b)})
	}
}

// TestImageRoundTrip writes an archive, reads it back with the library's
// reader (what ctr and docker load see) and checks the config, the media
// types, the layers' entries (parents added, sorted, modes, root-owned,
// one time) and that the layers' digests match their content.
func TestImageRoundTrip(t *testing.T) {
	img, err := Image(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteArchive(path, map[string]v1.Image{"rota-test:1.2.3": img}); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("rota-test:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	// The archive keeps the config byte for byte (and so its digest, the
	// image ID); the reader makes up its own manifest.
	want, _ := img.ConfigName()
	if got, err := back.ConfigName(); err != nil || got != want {
		t.Errorf("config digest read back %v (%v), want %v", got, err, want)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/prog"}) ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "1.2.3" || cfg.OS != "linux" ||
		cfg.Architecture != "amd64" || !cfg.Created.Time.Equal(created) {
		t.Errorf("config %+v", cfg)
	}
	if len(cfg.History) != 2 || cfg.History[1].CreatedBy != "program" {
		t.Errorf("history %+v", cfg.History)
	}
	layers, err := back.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2", len(layers))
	}
	for i, l := range layers {
		if d, _ := l.DiffID(); d != cfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %d diff id %v, config %v", i, d, cfg.RootFS.DiffIDs[i])
		}
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := layerEntries(t, rc)
	wantEntries := []entry{
		{"lib", tar.TypeSymlink, 0o777, "usr/lib", 0, 0, created, ""},
		{"usr/", tar.TypeDir, 0o755, "", 0, 0, created, ""},
		{"usr/local/", tar.TypeDir, 0o755, "", 0, 0, created, ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, "", 0, 0, created, ""},
		{"usr/local/bin/prog", tar.TypeReg, 0o755, "", 0, 0, created, "\x7fELF"},
	}
	if !slices.Equal(got, wantEntries) {
		t.Errorf("layer entries\n got %+v\nwant %+v", got, wantEntries)
	}
}

// TestDeterministic: the same spec gives the same digest.
func TestDeterministic(t *testing.T) {
	a, err := Image(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Image(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ: %v %v", da, db)
	}
	s := testSpec()
	s.Labels = map[string]string{"org.opencontainers.image.version": "1.2.4"}
	c, err := Image(s)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Error("a different label gave the same digest")
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []File
		want  string
	}{
		{"relative", []File{{Path: "etc/passwd"}}, "not an absolute"},
		{"root", []File{{Path: "/"}}, "not an absolute"},
		{"twice", []File{{Path: "/a"}, {Path: "/a/"}}, "given twice"},
		{"under a file", []File{{Path: "/a"}, {Path: "/a/b"}}, "not a folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLayer(tc.files, created)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Image(Spec{Architecture: "amd64"}); err == nil {
		t.Error("an image without layers was built")
	}
	img, _ := Image(testSpec())
	if err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), map[string]v1.Image{"Bad Tag:1": img}); err == nil {
		t.Error("a bad tag was written")
	}
}
