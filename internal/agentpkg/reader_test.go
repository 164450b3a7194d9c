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
	"compress/zlib"
	"crypto/sha1" //nolint:gosec // xar's checksums are SHA-1.
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Readers of a flat package, written from the formats' descriptions and
// sharing nothing with the writer, so the tests check the package rather
// than the writer against itself.

// xarRead is a xar archive read back: its header and every file, by path,
// each checked against its checksums.
type xarRead struct {
	headerSize, version uint16
	cksumAlg            uint32
	tocChecksumStyle    string
	heapStart           int64
	files               map[string][]byte
	// entries are the TOC's entries, by path.
	entries map[string]tocEntry
}

type tocEntry struct {
	Name  string `xml:"name"`
	Type  string `xml:"type"`
	Mode  string `xml:"mode"`
	UID   int    `xml:"uid"`
	GID   int    `xml:"gid"`
	User  string `xml:"user"`
	Group string `xml:"group"`
	Data  *struct {
		Offset   int64 `xml:"offset"`
		Length   int64 `xml:"length"`
		Size     int64 `xml:"size"`
		Encoding struct {
			Style string `xml:"style,attr"`
		} `xml:"encoding"`
		Archived  tocChecksum `xml:"archived-checksum"`
		Extracted tocChecksum `xml:"extracted-checksum"`
	} `xml:"data"`
	Children []tocEntry `xml:"file"`
}

type tocChecksum struct {
	Style string `xml:"style,attr"`
	Hex   string `xml:",chardata"`
}

func readXar(b []byte) (*xarRead, error) {
	if len(b) < 28 || string(b[:4]) != "xar!" {
		return nil, errors.New("no xar header")
	}
	x := &xarRead{
		headerSize: binary.BigEndian.Uint16(b[4:6]),
		version:    binary.BigEndian.Uint16(b[6:8]),
		cksumAlg:   binary.BigEndian.Uint32(b[24:28]),
		files:      map[string][]byte{},
		entries:    map[string]tocEntry{},
	}
	tocCompressed, tocUncompressed := binary.BigEndian.Uint64(b[8:16]), binary.BigEndian.Uint64(b[16:24])
	if tocCompressed > math.MaxInt32 || tocUncompressed > math.MaxInt32 {
		return nil, errors.New("the TOC runs past the end")
	}
	x.heapStart = int64(x.headerSize) + int64(tocCompressed)
	if x.heapStart > int64(len(b)) {
		return nil, errors.New("the TOC runs past the end")
	}
	ztoc := b[x.headerSize:x.heapStart]
	zr, err := zlib.NewReader(bytes.NewReader(ztoc))
	if err != nil {
		return nil, fmt.Errorf("TOC: %w", err)
	}
	toc, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("TOC: %w", err)
	}
	if uint64(len(toc)) != tocUncompressed {
		return nil, fmt.Errorf("TOC is %d bytes, the header says %d", len(toc), tocUncompressed)
	}
	var doc struct {
		Checksum struct {
			Style  string `xml:"style,attr"`
			Offset int64  `xml:"offset"`
			Size   int64  `xml:"size"`
		} `xml:"toc>checksum"`
		Files []tocEntry `xml:"toc>file"`
	}
	if err := xml.Unmarshal(toc, &doc); err != nil {
		return nil, fmt.Errorf("TOC: %w", err)
	}
	x.tocChecksumStyle = doc.Checksum.Style
	stored, err := heapSlice(b, x.heapStart, doc.Checksum.Offset, doc.Checksum.Size)
	if err != nil {
		return nil, fmt.Errorf("TOC checksum: %w", err)
	}
	if sum := sha1.Sum(ztoc); doc.Checksum.Style != "sha1" || !bytes.Equal(stored, sum[:]) { //nolint:gosec // xar's.
		return nil, fmt.Errorf("TOC checksum (%s) %x does not match the TOC's SHA-1 %x", doc.Checksum.Style, stored, sum)
	}
	return x, x.walk(b, "", doc.Files)
}

func (x *xarRead) walk(b []byte, dir string, entries []tocEntry) error {
	for _, e := range entries {
		p := e.Name
		if dir != "" {
			p = dir + "/" + e.Name
		}
		x.entries[p] = e
		if e.Type == "directory" {
			if err := x.walk(b, p, e.Children); err != nil {
				return err
			}
			continue
		}
		if e.Data == nil {
			return fmt.Errorf("%s: no data", p)
		}
		archived, err := heapSlice(b, x.heapStart, e.Data.Offset, e.Data.Length)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := checkSHA1(e.Data.Archived, archived); err != nil {
			return fmt.Errorf("%s: archived-checksum: %w", p, err)
		}
		var extracted []byte
		switch e.Data.Encoding.Style {
		case "application/octet-stream":
			extracted = archived
		case "application/x-gzip": // xar's "gzip" is a zlib stream
			zr, err := zlib.NewReader(bytes.NewReader(archived))
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if extracted, err = io.ReadAll(zr); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		default:
			return fmt.Errorf("%s: encoding %q", p, e.Data.Encoding.Style)
		}
		if int64(len(extracted)) != e.Data.Size {
			return fmt.Errorf("%s: %d bytes extracted, <size> says %d", p, len(extracted), e.Data.Size)
		}
		if err := checkSHA1(e.Data.Extracted, extracted); err != nil {
			return fmt.Errorf("%s: extracted-checksum: %w", p, err)
		}
		x.files[p] = extracted
	}
	return nil
}

func heapSlice(b []byte, heapStart, offset, length int64) ([]byte, error) {
	start := heapStart + offset
	if offset < 0 || length < 0 || start+length > int64(len(b)) {
		return nil, fmt.Errorf("heap range %d+%d is outside the archive", offset, length)
	}
	return b[start : start+length], nil
}

func checkSHA1(c tocChecksum, data []byte) error {
	sum := sha1.Sum(data) //nolint:gosec // xar's.
	if c.Style != "sha1" || c.Hex != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("%s %q, but the data's SHA-1 is %x", c.Style, c.Hex, sum)
	}
	return nil
}

// cpioEntry is an entry of an odc cpio archive.
type cpioEntry struct {
	name                            string
	dev, ino, mode, uid, gid, nlink int64
	rdev, mtime                     int64
	data                            []byte
}

// readGzipODC reads a gzip-compressed odc cpio archive up to its trailer.
func readGzipODC(b []byte) ([]cpioEntry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var entries []cpioEntry
	for {
		if len(raw) < 76 || string(raw[:6]) != "070707" {
			return nil, fmt.Errorf("no odc header after %d entries", len(entries))
		}
		// Field widths after the magic: dev ino mode uid gid nlink rdev
		// (6 each), mtime (11), namesize (6), filesize (11).
		widths := []int{6, 6, 6, 6, 6, 6, 6, 11, 6, 11}
		fields := make([]int64, len(widths))
		at := 6
		for i, w := range widths {
			v, err := strconv.ParseInt(string(raw[at:at+w]), 8, 64)
			if err != nil {
				return nil, fmt.Errorf("header field %d: %w", i, err)
			}
			fields[i] = v
			at += w
		}
		nameSize, fileSize := fields[8], fields[9]
		if int64(len(raw)) < 76+nameSize+fileSize || nameSize < 1 || raw[76+nameSize-1] != 0 {
			return nil, errors.New("entry runs past the end or its name is not NUL-terminated")
		}
		e := cpioEntry{
			name: string(raw[76 : 76+nameSize-1]),
			dev:  fields[0], ino: fields[1], mode: fields[2], uid: fields[3], gid: fields[4],
			nlink: fields[5], rdev: fields[6], mtime: fields[7],
			data: raw[76+nameSize : 76+nameSize+fileSize],
		}
		raw = raw[76+nameSize+fileSize:]
		if e.name == "TRAILER!!!" {
			return entries, nil
		}
		entries = append(entries, e)
	}
}

// bomPath is a path of a Bom's Paths tree, with its PathInfo2, widened.
type bomPath struct {
	typ, mode, uid, gid, mtime, size, sum int64
}

// bomRead is what the tests check of a Bom.
type bomRead struct {
	vars          []string
	numberOfPaths int64
	paths         map[string]bomPath
}

func readBom(b []byte) (*bomRead, error) {
	if len(b) < 32 || string(b[:8]) != "BOMStore" {
		return nil, errors.New(`no "BOMStore" magic`)
	}
	u32 := func(at uint32) uint32 {
		if int(at)+4 > len(b) {
			return 0
		}
		return binary.BigEndian.Uint32(b[at:])
	}
	if v := u32(8); v != 1 {
		return nil, fmt.Errorf("version %d", v)
	}
	numberOfBlocks, indexOffset, indexLength, varsOffset := u32(12), u32(16), u32(20), u32(24)
	if int(indexOffset)+int(indexLength) != len(b) {
		return nil, fmt.Errorf("index %d+%d does not end the %d-byte file", indexOffset, indexLength, len(b))
	}
	tableCount := u32(indexOffset)
	if tableCount != numberOfBlocks+1 {
		return nil, fmt.Errorf("%d block pointers for %d blocks and the null one", tableCount, numberOfBlocks)
	}
	block := func(id uint32) ([]byte, error) {
		if id == 0 || id >= tableCount {
			return nil, fmt.Errorf("block %d out of range", id)
		}
		addr, n := u32(indexOffset+4+id*8), u32(indexOffset+8+id*8)
		if int(addr)+int(n) > len(b) {
			return nil, fmt.Errorf("block %d runs past the end", id)
		}
		return b[addr : addr+n], nil
	}
	r := &bomRead{paths: map[string]bomPath{}}
	vars := map[string]uint32{}
	at := varsOffset + 4
	for range u32(varsOffset) {
		id, n := u32(at), uint32(b[at+4])
		name := string(b[at+5 : at+5+n])
		r.vars = append(r.vars, name)
		vars[name] = id
		at += 5 + n
	}
	info, err := block(vars["BomInfo"])
	if err != nil || len(info) < 12 {
		return nil, fmt.Errorf("BomInfo: %v", err)
	}
	r.numberOfPaths = int64(binary.BigEndian.Uint32(info[4:]))
	tree, err := block(vars["Paths"])
	if err != nil || len(tree) != 21 || string(tree[:4]) != "tree" {
		return nil, fmt.Errorf("Paths is not a tree: %v", err)
	}
	names, parents := map[uint32]string{}, map[uint32]uint32{}
	infos := map[uint32]bomPath{}
	var visit func(id uint32) error
	visit = func(id uint32) error {
		node, err := block(id)
		if err != nil {
			return err
		}
		isLeaf, count := binary.BigEndian.Uint16(node), binary.BigEndian.Uint16(node[2:])
		for i := range uint32(count) {
			index0, index1 := binary.BigEndian.Uint32(node[12+i*8:]), binary.BigEndian.Uint32(node[16+i*8:])
			if isLeaf == 0 {
				if err := visit(index0); err != nil {
					return err
				}
				continue
			}
			info1, err := block(index0)
			if err != nil {
				return err
			}
			info2, err := block(binary.BigEndian.Uint32(info1[4:]))
			if err != nil || len(info2) < 31 {
				return fmt.Errorf("PathInfo2: %v", err)
			}
			file, err := block(index1)
			if err != nil {
				return err
			}
			pathID := binary.BigEndian.Uint32(info1)
			parents[pathID] = binary.BigEndian.Uint32(file)
			names[pathID] = strings.TrimRight(string(file[4:]), "\x00")
			be32 := func(at int) int64 { return int64(binary.BigEndian.Uint32(info2[at:])) }
			infos[pathID] = bomPath{
				typ: int64(info2[0]), mode: int64(binary.BigEndian.Uint16(info2[4:])),
				uid: be32(6), gid: be32(10), mtime: be32(14), size: be32(18), sum: be32(23),
			}
		}
		return nil
	}
	if err := visit(binary.BigEndian.Uint32(tree[8:])); err != nil {
		return nil, fmt.Errorf("Paths: %w", err)
	}
	for id := range names {
		p, seen := names[id], map[uint32]bool{id: true}
		for parent := parents[id]; parent != 0; parent = parents[parent] {
			if seen[parent] || names[parent] == "" {
				return nil, fmt.Errorf("path %d has a broken parent chain", id)
			}
			seen[parent] = true
			p = names[parent] + "/" + p
		}
		r.paths[p] = infos[id]
	}
	return r, nil
}

// posixCksum is POSIX cksum's CRC, bit by bit.
func posixCksum(data []byte) int64 {
	var crc uint32
	feed := func(b byte) {
		crc ^= uint32(b) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04C11DB7
			} else {
				crc <<= 1
			}
		}
	}
	for _, b := range data {
		feed(b)
	}
	for n := len(data); n > 0; n >>= 8 {
		feed(byte(n))
	}
	return int64(^crc)
}
