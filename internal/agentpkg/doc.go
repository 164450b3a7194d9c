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

// Package agentpkg writes the guest agent's macOS installer package: a flat
// package (the xar archive `installer -pkg` and `pkgutil --expand` read),
// built on any OS with nothing but Go's standard library, so a release can
// ship the agent without a Mac.
//
// The package is a product archive holding one component:
//
//	Distribution                   product archive: one pkg-ref, one hidden choice
//	macvirt-agent.pkg/PackageInfo  identifier, version, install-location "/",
//	                               payload size, the postinstall script
//	macvirt-agent.pkg/Bom          bill of materials (BOMStore) of the payload
//	macvirt-agent.pkg/Payload      gzip cpio (odc): the agent binary and its
//	                               LaunchDaemon, with their parent directories
//	macvirt-agent.pkg/Scripts      gzip cpio (odc): postinstall, which
//	                               (re)bootstraps the LaunchDaemon
//
// Every file in the archive is stored uncompressed (the Payload and Scripts
// are gzip already) with SHA-1 archived and extracted checksums; the table
// of contents is zlib-compressed XML whose SHA-1 heads the heap. Files are
// owned by root:wheel; the Bom is laid out as bomutils' mkbom lays it out.
//
// The output is a function of the inputs: entries are sorted and every time
// stamp is Options.ModTime, so two builds from the same inputs with the same
// Go toolchain are byte-identical.
//
// It is checked structurally only: the tests read every layer back with
// readers of their own, and compare the Bom with bomutils' mkbom output.
// Installing it is untested: no macOS installer has run it.
package agentpkg
