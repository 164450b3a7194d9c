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
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path"
	"sort"
)

// A component package's Bom is Apple's bill of materials, a "BOMStore": a
// store of numbered blocks and named variables pointing at them, all
// big-endian. It is laid out here as bomutils' mkbom lays it out:
//
//	0    header: "BOMStore", version 1, number of non-null blocks, offset
//	     and length of the block table (plus free list), offset and
//	     length of the variables; zero-padded to 512 bytes
//	512  variables: count, then per variable its block, name length, name
//	     the blocks, in the order they were made
//	     the block table: count (with the null block 0), then per block
//	     its offset and length; then an empty free list (count 0 and two
//	     null entries)
//
// The variables are BomInfo (version, paths + 1, one zero info entry),
// Paths (a B-tree of every payload path), and the empty trees HLIndex
// (hard links), VIndex and Size64. A Paths entry is a pair of blocks: its
// PathInfo1 (id, and the block of its PathInfo2: type, mode, uid, gid,
// mtime, size, checksum) and its file (the parent's id and the name).
// Paths are numbered breadth-first from "." (id 1, parent 0), children in
// byte order of their names, which is also the order of the tree's keys.

const (
	bomHeaderSize = 512
	bomBlockSize  = 4096
	// bomLeafPaths is how many paths a leaf of the Paths tree holds; more
	// need branch nodes, which this writer does not make (the agent's
	// payload has 8).
	bomLeafPaths = 256
	// bomArchitecture is PathInfo2's architecture field as mkbom writes it.
	bomArchitecture = 3
)

// The PathInfo2 types.
const (
	bomTypeFile = 1
	bomTypeDir  = 2
)

// bomStore collects blocks; block ids count from 1, 0 being the null block.
type bomStore struct {
	blocks [][]byte
	vars   []bomVar
}

type bomVar struct {
	name  string
	block uint32
}

func (s *bomStore) add(b []byte) uint32 {
	s.blocks = append(s.blocks, b)
	return bound32(len(s.blocks))
}

func (s *bomStore) addVar(name string, b []byte) {
	s.vars = append(s.vars, bomVar{name: name, block: s.add(b)})
}

// be builds a big-endian block.
type be []byte

func (b *be) u8(v uint8) *be   { *b = append(*b, v); return b }
func (b *be) u16(v uint16) *be { *b = binary.BigEndian.AppendUint16(*b, v); return b }
func (b *be) u32(v uint32) *be { *b = binary.BigEndian.AppendUint32(*b, v); return b }
func (b *be) str(v string) *be { *b = append(*b, v...); return b }

// bound32 is n as a uint32; see bounded.
func bound32(n int) uint32 { return bounded[uint32](n) }

// bounded is n as T. Every n here is bounded by what writeBOM checks
// first (at most bomLeafPaths paths, files under 4 GiB), so one that does
// not fit is a bug of this package.
func bounded[T uint8 | uint16 | uint32](n int) T {
	if n < 0 || uint64(n) > uint64(^T(0)) {
		panic(fmt.Sprintf("agentpkg: %d overflows a Bom's field", n))
	}
	return T(n)
}

// bomTree is a BOMTree block: "tree", version 1, the root node's block,
// the node size, the number of paths, and a zero byte.
func bomTree(child, blockSize, paths uint32) []byte {
	var b be
	return *b.str("tree").u32(1).u32(child).u32(blockSize).u32(paths).u8(0)
}

// bomEmptyLeaf is a Paths node that is a leaf holding nothing.
func bomEmptyLeaf() []byte {
	var b be
	return *b.u16(1).u16(0).u32(0).u32(0)
}

// writeBOM returns the Bom of a payload's entries, each owned by
// root:wheel and stamped mtime.
func writeBOM(entries []entry, mtime uint32) ([]byte, error) {
	if len(entries) > bomLeafPaths {
		return nil, fmt.Errorf("%d paths need a Paths tree of more than one leaf", len(entries))
	}
	for _, e := range entries {
		if int64(len(e.data)) > math.MaxUint32 {
			return nil, fmt.Errorf("%s: %d bytes do not fit the Bom's 32-bit size", e.path, len(e.data))
		}
	}
	ordered, err := breadthFirst(entries)
	if err != nil {
		return nil, err
	}
	var s bomStore
	var info be
	s.addVar("BomInfo", *info.u32(1).u32(bound32(len(entries) + 1)).u32(1).u32(0).u32(0).u32(0).u32(0))

	var leaf be
	leaf.u16(1).u16(bounded[uint16](len(ordered))).u32(0).u32(0)
	for _, n := range ordered {
		e := n.entry
		typ, size, sum := uint8(bomTypeDir), uint32(0), uint32(0)
		if !e.isDir() {
			typ, size, sum = bomTypeFile, bound32(len(e.data)), cksum(e.data)
		}
		var info2, info1, file be
		info2.u8(typ).u8(1).u16(bomArchitecture).u16(e.mode).u32(0).u32(0).u32(mtime).u32(size).u8(1).u32(sum).u32(0)
		info1.u32(n.id).u32(s.add(info2))
		info1Block := s.add(info1)
		leaf.u32(info1Block).u32(s.add(*file.u32(n.parent).str(n.name).u8(0)))
	}
	s.addVar("Paths", bomTree(s.add(leaf), bomBlockSize, bound32(len(ordered))))
	s.addVar("HLIndex", bomTree(s.add(bomEmptyLeaf()), bomBlockSize, 0))
	vtree := s.add(bomTree(s.add(bomEmptyLeaf()), 128, 0))
	var vindex be
	s.addVar("VIndex", *vindex.u32(1).u32(vtree).u32(0).u8(0))
	s.addVar("Size64", bomTree(s.add(bomEmptyLeaf()), bomBlockSize, 0))
	return s.bytes(), nil
}

func (s *bomStore) bytes() []byte {
	var vars be
	vars.u32(bound32(len(s.vars)))
	for _, v := range s.vars {
		vars.u32(v.block).u8(bounded[uint8](len(v.name))).str(v.name)
	}
	blocksStart := bomHeaderSize + len(vars)
	var blocks []byte
	var table be
	table.u32(bound32(len(s.blocks) + 1)).u32(0).u32(0)
	for _, b := range s.blocks {
		table.u32(bound32(blocksStart + len(blocks))).u32(bound32(len(b)))
		blocks = append(blocks, b...)
	}
	table.u32(0).u32(0).u32(0).u32(0).u32(0) // the free list: none, and two null entries
	var header be
	header.str("BOMStore").u32(1).u32(bound32(len(s.blocks))).
		u32(bound32(blocksStart + len(blocks))).u32(bound32(len(table))).
		u32(bomHeaderSize).u32(bound32(len(vars)))
	out := make([]byte, bomHeaderSize, blocksStart+len(blocks)+len(table))
	copy(out, header)
	out = append(out, vars...)
	out = append(out, blocks...)
	return append(out, table...)
}

// bomNode is a path of the Paths tree: its id, its parent's, and its name
// in its parent.
type bomNode struct {
	entry
	id, parent uint32
	name       string
}

// breadthFirst numbers entries breadth-first from ".", each directory's
// children in byte order of their names.
func breadthFirst(entries []entry) ([]bomNode, error) {
	children := map[string][]entry{}
	var root *entry
	for i, e := range entries {
		if e.path == "/" {
			root = &entries[i]
			continue
		}
		children[path.Dir(e.path)] = append(children[path.Dir(e.path)], e)
	}
	if root == nil {
		return nil, errors.New("the payload has no root directory")
	}
	ordered := []bomNode{{entry: *root, id: 1, name: "."}}
	for i := 0; i < len(ordered); i++ {
		kids := children[ordered[i].path]
		sort.Slice(kids, func(a, b int) bool { return path.Base(kids[a].path) < path.Base(kids[b].path) })
		for _, k := range kids {
			ordered = append(ordered, bomNode{entry: k, id: bound32(len(ordered) + 1), parent: ordered[i].id, name: path.Base(k.path)})
		}
	}
	if len(ordered) != len(entries) {
		return nil, fmt.Errorf("%d of %d paths are not under the root", len(entries)-len(ordered), len(entries))
	}
	return ordered, nil
}

// cksumTable is the CRC-32 (polynomial 0x04C11DB7, most significant bit
// first) of each byte value.
var cksumTable = func() (t [256]uint32) {
	for i := range t {
		c := uint32(i) << 24
		for range 8 {
			if c&(1<<31) != 0 {
				c = c<<1 ^ 0x04C11DB7
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// cksum is POSIX cksum's CRC of data, the checksum a Bom records of a
// file: the CRC of the bytes then of their length (least significant byte
// first, no trailing zeros), inverted.
func cksum(data []byte) uint32 {
	var c uint32
	step := func(b byte) { c = c<<8 ^ cksumTable[byte(c>>24)^b] }
	for _, b := range data {
		step(b)
	}
	for n := len(data); n > 0; n >>= 8 {
		step(byte(n))
	}
	return ^c
}
