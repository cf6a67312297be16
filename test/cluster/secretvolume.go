package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
)

// SecretVolume lays files out as the kubelet does for a Secret volume
// (pkg/volume/util's AtomicWriter): each key is a symlink to ..data/<key>,
// ..data is a symlink to a timestamped folder, and an update writes a new
// folder, swaps ..data with one rename and removes the old folder. A
// process watching <dir>/<key> sees its file deleted and a new one in its
// place, never a half-written file; certificate reloaders are tested
// against exactly that.
type SecretVolume struct {
	Dir string

	mu  sync.Mutex
	gen int
}

// NewSecretVolume returns a SecretVolume in dir (created if needed).
func NewSecretVolume(dir string) (*SecretVolume, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &SecretVolume{Dir: dir}, nil
}

// Path returns the path a container reads key at.
func (v *SecretVolume) Path(key string) string { return filepath.Join(v.Dir, key) }

// Write replaces the volume's content with files, as one update.
func (v *SecretVolume) Write(files map[string][]byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++
	ts := "..gen_" + strconv.Itoa(v.gen)
	tsDir := filepath.Join(v.Dir, ts)
	if err := os.Mkdir(tsDir, 0o700); err != nil {
		return err
	}
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join(tsDir, k), files[k], 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	tmp := filepath.Join(v.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		return fmt.Errorf("swapping ..data: %w", err)
	}
	for _, k := range keys {
		link := filepath.Join(v.Dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	if old != "" && old != ts {
		return os.RemoveAll(filepath.Join(v.Dir, old))
	}
	return nil
}
