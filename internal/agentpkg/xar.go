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
	"compress/zlib"
	"crypto/sha1" //nolint:gosec // xar's table of contents and file checksums are SHA-1 (xar.h's XAR_CKSUM_SHA1), as Apple's tools write them.
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"time"
)

// A flat package is a xar archive: a 28-byte header, the zlib-compressed
// XML table of contents (TOC), then the heap. The header (big-endian) is
// the magic "xar!", its own size, version 1, the TOC's compressed and
// uncompressed lengths, and the TOC checksum's algorithm. The heap starts
// with the SHA-1 of the compressed TOC, where the TOC's <checksum> says
// (offset 0, size 20), then each file's data, at the <offset> (from the
// heap's start) and <length> its <data> gives.

const (
	xarMagic      = "xar!"
	xarHeaderSize = 28
	xarVersion    = 1
	xarCksumSHA1  = 1
	// xarEncodingRaw stores data as it is: the Payload and Scripts are
	// gzip already, and the rest is small.
	xarEncodingRaw = "application/octet-stream"
	// xarTimeLayout is how xar writes times (strftime "%FT%T").
	xarTimeLayout = "2006-01-02T15:04:05"
)

// xarFile is a file or directory to archive, owned by root:wheel, mode
// 0644 or (directories) 0755.
type xarFile struct {
	name     string
	dir      bool
	data     []byte
	children []xarFile
}

// The table of contents, as xar writes it.
type (
	xarDoc struct {
		XMLName xml.Name `xml:"xar"`
		TOC     xarTOC   `xml:"toc"`
	}
	xarTOC struct {
		Checksum struct {
			Style  string `xml:"style,attr"`
			Offset int    `xml:"offset"`
			Size   int    `xml:"size"`
		} `xml:"checksum"`
		CreationTime string        `xml:"creation-time"`
		Files        []*xarTOCFile `xml:"file"`
	}
	xarTOCFile struct {
		ID    int           `xml:"id,attr"`
		Data  *xarTOCData   `xml:"data,omitempty"`
		CTime string        `xml:"ctime"`
		MTime string        `xml:"mtime"`
		ATime string        `xml:"atime"`
		Group string        `xml:"group"`
		GID   int           `xml:"gid"`
		User  string        `xml:"user"`
		UID   int           `xml:"uid"`
		Mode  string        `xml:"mode"`
		Type  string        `xml:"type"`
		Name  string        `xml:"name"`
		Files []*xarTOCFile `xml:"file"`
	}
	xarTOCData struct {
		Length   int `xml:"length"`
		Offset   int `xml:"offset"`
		Size     int `xml:"size"`
		Encoding struct {
			Style string `xml:"style,attr"`
		} `xml:"encoding"`
		ArchivedChecksum  xarChecksum `xml:"archived-checksum"`
		ExtractedChecksum xarChecksum `xml:"extracted-checksum"`
	}
	xarChecksum struct {
		Style string `xml:"style,attr"`
		Value string `xml:",chardata"`
	}
)

// writeXAR archives files, in the order given, stamped mtime.
func writeXAR(files []xarFile, mtime time.Time) ([]byte, error) {
	w := xarWriter{heap: bytes.NewBuffer(make([]byte, sha1.Size)), mtime: mtime.UTC().Format(xarTimeLayout)}
	var doc xarDoc
	doc.TOC.Checksum.Style = "sha1"
	doc.TOC.Checksum.Size = sha1.Size
	doc.TOC.CreationTime = w.mtime
	doc.TOC.Files = w.add(files)

	toc, err := xml.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, fmt.Errorf("marshalling the xar TOC: %w", err)
	}
	toc = append([]byte(xml.Header), toc...)
	var ztoc bytes.Buffer
	zw, err := zlib.NewWriterLevel(&ztoc, zlib.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(toc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	heap := w.heap.Bytes()
	sum := sha1.Sum(ztoc.Bytes()) //nolint:gosec // see the import.
	copy(heap, sum[:])

	out := make([]byte, 0, xarHeaderSize+ztoc.Len()+len(heap))
	out = append(out, xarMagic...)
	out = binary.BigEndian.AppendUint16(out, xarHeaderSize)
	out = binary.BigEndian.AppendUint16(out, xarVersion)
	out = binary.BigEndian.AppendUint64(out, uint64(max(ztoc.Len(), 0)))
	out = binary.BigEndian.AppendUint64(out, uint64(max(len(toc), 0)))
	out = binary.BigEndian.AppendUint32(out, xarCksumSHA1)
	out = append(out, ztoc.Bytes()...)
	return append(out, heap...), nil
}

// xarWriter numbers files depth-first from 1 and lays their data out in
// the heap in that order.
type xarWriter struct {
	heap   *bytes.Buffer
	mtime  string
	nextID int
}

func (w *xarWriter) add(files []xarFile) []*xarTOCFile {
	var out []*xarTOCFile
	for _, f := range files {
		w.nextID++
		t := &xarTOCFile{ID: w.nextID, CTime: w.mtime + "Z", MTime: w.mtime + "Z", ATime: w.mtime + "Z",
			Group: "wheel", GID: 0, User: "root", UID: 0, Mode: "0644", Type: "file", Name: f.name}
		if f.dir {
			t.Mode, t.Type = "0755", "directory"
			t.Files = w.add(f.children)
		} else {
			sum := sha1.Sum(f.data) //nolint:gosec // see the import.
			d := &xarTOCData{Length: len(f.data), Offset: w.heap.Len(), Size: len(f.data)}
			d.Encoding.Style = xarEncodingRaw
			// Stored raw, the archived and the extracted data are the same.
			d.ArchivedChecksum = xarChecksum{Style: "sha1", Value: hex.EncodeToString(sum[:])}
			d.ExtractedChecksum = d.ArchivedChecksum
			t.Data = d
			w.heap.Write(f.data)
		}
		out = append(out, t)
	}
	return out
}
