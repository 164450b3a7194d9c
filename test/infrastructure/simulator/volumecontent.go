/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// What the simulated disks hold. A volume (a PVC, or a VolumeSnapshot) has
// a directory of its own, keyed by the object's UID, which a simulated
// guest mounts as its root: what the guest's agent writes there survives a
// reboot, and a clone, a snapshot or a restore copies it, so a Mac captured
// as an image carries what it held into every clone. A volume the
// simulator never populated (a PVC made by hand, an import) holds the
// golden image, Options.GuestFiles; a blank one holds nothing.

// volumeContents are the simulated volumes' directories.
type volumeContents struct {
	mu   sync.Mutex
	root string
	dirs map[types.UID]string
}

// dir is the directory of the volume with uid, made on first use; fresh
// says it was just made (and is empty).
func (c *volumeContents) dir(uid types.UID) (dir string, fresh bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.dirs[uid]; ok {
		return d, false, nil
	}
	if c.root == "" {
		if c.root, err = os.MkdirTemp("", "macvirt-sim-volumes-"); err != nil {
			return "", false, err
		}
	}
	d := filepath.Join(c.root, string(uid))
	if err := os.MkdirAll(d, 0o750); err != nil {
		return "", false, err
	}
	if c.dirs == nil {
		c.dirs = map[types.UID]string{}
	}
	c.dirs[uid] = d
	return d, true, nil
}

// remove forgets a volume that is gone.
func (c *volumeContents) remove(uid types.UID) {
	c.mu.Lock()
	d, ok := c.dirs[uid]
	delete(c.dirs, uid)
	c.mu.Unlock()
	if ok {
		_ = os.RemoveAll(d)
	}
}

// VolumeDir is the directory holding what the volume (PVC or
// VolumeSnapshot) with uid holds; a volume the simulator has not populated
// yet holds the golden image (Options.GuestFiles).
func (s *Simulator) VolumeDir(uid types.UID) (string, error) {
	d, fresh, err := s.volumes.dir(uid)
	if err != nil || !fresh {
		return d, err
	}
	return d, writeGuestFiles(d, s.opts.GuestFiles)
}

// GuestFiles are the golden image's files (Options.GuestFiles), which a
// fake Mac's VM's disk also holds.
func (s *Simulator) GuestFiles() map[string]GuestFile { return s.opts.GuestFiles }

// populateBlank records the volume with uid as blank: it holds nothing.
func (s *Simulator) populateBlank(uid types.UID) error {
	s.volumes.remove(uid)
	_, _, err := s.volumes.dir(uid)
	return err
}

// populateFrom makes the volume with to hold a copy of what the volume
// with from holds (a clone, a snapshot, a restore); a source the
// simulator never populated holds the golden image.
func (s *Simulator) populateFrom(from, to types.UID) error {
	src, err := s.VolumeDir(from)
	if err != nil {
		return err
	}
	s.volumes.remove(to)
	dst, _, err := s.volumes.dir(to)
	if err != nil {
		return err
	}
	return copyTree(src, dst)
}

// writeGuestFiles writes the golden image's files under dir.
func writeGuestFiles(dir string, files map[string]GuestFile) error {
	for path, f := range files {
		p := filepath.Join(dir, filepath.Clean("/"+path))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Content, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the regular files and directories under src into dst,
// keeping their modes; symlinks are copied as links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target) //nolint:gosec // a link inside a simulated disk, copied as it is, never followed.
		default:
			b, err := os.ReadFile(p) //nolint:gosec // a file of a simulated disk.
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm()) //nolint:gosec // a file of a simulated disk, keeping its mode.
		}
	})
}
