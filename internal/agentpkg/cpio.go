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

package agentpkg

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"path"
)

// A flat package's Payload and Scripts are gzip-compressed cpio archives in
// the POSIX.1 "odc" format: per entry a 76-byte header of octal ASCII
// fields, the NUL-terminated name and the data, with no padding; a
// "TRAILER!!!" entry ends the archive.

const (
	cpioMagic   = "070707"
	cpioTrailer = "TRAILER!!!"
	// cpioMaxSize is the largest value of the 11-digit octal fields
	// (c_mtime, c_filesize).
	cpioMaxSize = 1<<33 - 1
)

// gzipCPIO returns entries as a gzip-compressed odc cpio archive, each
// owned by root:wheel and stamped mtime. Inode numbers count from 1 in
// entry order; a directory's link count is 2 plus its subdirectories, a
// file's 1.
func gzipCPIO(entries []entry, mtime int64) ([]byte, error) {
	if mtime < 0 || mtime > cpioMaxSize {
		return nil, fmt.Errorf("modification time %d does not fit odc's c_mtime", mtime)
	}
	subdirs := map[string]int{}
	for _, e := range entries {
		if e.isDir() && e.path != "/" {
			subdirs[path.Dir(e.path)]++
		}
	}
	var archive bytes.Buffer
	for i, e := range entries {
		if len(e.data) > cpioMaxSize {
			return nil, fmt.Errorf("%s: %d bytes do not fit odc's c_filesize", e.path, len(e.data))
		}
		nlink := 1
		if e.isDir() {
			nlink = 2 + subdirs[e.path]
		}
		writeODCHeader(&archive, odcHeader{ino: i + 1, mode: e.mode, nlink: nlink, mtime: mtime, name: e.name(), size: len(e.data)})
		archive.Write(e.data)
	}
	writeODCHeader(&archive, odcHeader{nlink: 1, name: cpioTrailer})

	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(archive.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// odcHeader holds the fields of an odc header that vary; c_dev, c_uid,
// c_gid (root:wheel) and c_rdev are 0.
type odcHeader struct {
	ino   int
	mode  uint16
	nlink int
	mtime int64
	name  string
	size  int
}

func writeODCHeader(w *bytes.Buffer, h odcHeader) {
	// c_magic c_dev c_ino c_mode c_uid c_gid c_nlink c_rdev c_mtime
	// c_namesize c_filesize; c_namesize counts the name's NUL.
	fmt.Fprintf(w, "%s%06o%06o%06o%06o%06o%06o%06o%011o%06o%011o%s\x00",
		cpioMagic, 0, h.ino, h.mode, 0, 0, h.nlink, 0, h.mtime, len(h.name)+1, h.size, h.name)
}
