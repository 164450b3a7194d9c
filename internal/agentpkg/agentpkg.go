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
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"sort"
	"time"
)

// Where the package puts things on the Mac.
const (
	// AgentPath is where the agent binary is installed; the LaunchDaemon
	// must run it from there.
	AgentPath = "/usr/local/libexec/macvirt-agent"
	// LaunchDaemonsDir holds the LaunchDaemon, as <Label>.plist, which is
	// where launchd looks for system daemons at boot.
	LaunchDaemonsDir = "/Library/LaunchDaemons"
	// ComponentName is the component package's directory in the product
	// archive, which the Distribution's pkg-ref names.
	ComponentName = "macvirt-agent.pkg"
	// DefaultHostArchitectures is what the agent is built for (make
	// build-agent: darwin/amd64). On Apple silicon the installer asks for
	// Rosetta, as the binary needs it.
	DefaultHostArchitectures = "x86_64"
)

// Modes of the installed files. Everything is owned by root:wheel (0:0).
const (
	modeDir        = 0o040000
	modeRegular    = 0o100000
	permExecutable = 0o755
	permReadable   = 0o644
)

// Options are what goes into the package.
type Options struct {
	// Identifier is the package's identifier (pkgutil --pkgs lists it),
	// such as io.macvirt.agent.
	Identifier string
	// Version is the package's version, the agent's release.
	Version string
	// Agent is the macOS agent binary.
	Agent []byte
	// LaunchDaemon is the launchd property list that runs the agent. Its
	// Label names the installed file and what postinstall bootstraps, and
	// it must run AgentPath.
	LaunchDaemon []byte
	// ModTime stamps every file, directory and the archive itself, so that
	// a build is a function of its inputs (SOURCE_DATE_EPOCH). It must be
	// between the Unix epoch and 2106, where the Bom's 32-bit times end.
	ModTime time.Time
	// HostArchitectures are the Distribution's hostArchitectures,
	// comma-separated; DefaultHostArchitectures when empty.
	HostArchitectures string
}

var (
	identifierPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*$`)
	versionPattern    = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]*$`)
	archPattern       = regexp.MustCompile(`^[a-z0-9_]+(,[a-z0-9_]+)*$`)
)

// Build returns the flat package of the agent.
func Build(o Options) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	daemon, err := parseLaunchDaemon(o.LaunchDaemon)
	if err != nil {
		return nil, fmt.Errorf("reading the LaunchDaemon: %w", err)
	}
	if daemon.Program != AgentPath {
		return nil, fmt.Errorf("the LaunchDaemon runs %q, but the package installs the agent as %q", daemon.Program, AgentPath)
	}
	mtime, err := unixTime32(o.ModTime)
	if err != nil {
		return nil, err
	}

	payload := tree([]entry{
		{path: AgentPath, mode: modeRegular | permExecutable, data: o.Agent},
		{path: LaunchDaemonsDir + "/" + daemon.Label + ".plist", mode: modeRegular | permReadable, data: o.LaunchDaemon},
	})
	scripts := tree([]entry{
		{path: "/postinstall", mode: modeRegular | permExecutable, data: postinstall(daemon.Label)},
	})
	payloadArchive, err := gzipCPIO(payload, int64(mtime))
	if err != nil {
		return nil, fmt.Errorf("writing the Payload: %w", err)
	}
	scriptsArchive, err := gzipCPIO(scripts, int64(mtime))
	if err != nil {
		return nil, fmt.Errorf("writing the Scripts: %w", err)
	}
	bom, err := writeBOM(payload, mtime)
	if err != nil {
		return nil, fmt.Errorf("writing the Bom: %w", err)
	}
	kbytes := installKBytes(payload)
	info, err := packageInfo(o, len(payload), kbytes)
	if err != nil {
		return nil, err
	}
	dist, err := distribution(o, kbytes)
	if err != nil {
		return nil, err
	}
	return writeXAR([]xarFile{
		{name: "Distribution", data: dist},
		{name: ComponentName, dir: true, children: []xarFile{
			{name: "Bom", data: bom},
			{name: "PackageInfo", data: info},
			{name: "Payload", data: payloadArchive},
			{name: "Scripts", data: scriptsArchive},
		}},
	}, o.ModTime)
}

func (o Options) validate() error {
	var errs []error
	if !identifierPattern.MatchString(o.Identifier) {
		errs = append(errs, fmt.Errorf("identifier %q is not a reverse-DNS name", o.Identifier))
	}
	if !versionPattern.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("version %q is empty or has characters other than letters, digits, '.', '+' and '-'", o.Version))
	}
	if o.HostArchitectures != "" && !archPattern.MatchString(o.HostArchitectures) {
		errs = append(errs, fmt.Errorf("host architectures %q are not a comma-separated list such as x86_64,arm64", o.HostArchitectures))
	}
	if len(o.Agent) == 0 {
		errs = append(errs, errors.New("the agent binary is empty"))
	}
	if _, err := unixTime32(o.ModTime); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unixTime32 is t in the Bom's 32-bit seconds since the epoch.
func unixTime32(t time.Time) (uint32, error) {
	s := t.Unix()
	if s < 0 || s > math.MaxUint32 {
		return 0, fmt.Errorf("modification time %s is outside 1970 to 2106", t.UTC().Format(time.RFC3339))
	}
	return uint32(s), nil
}

// entry is a file or directory of the payload (or the scripts), by its
// absolute path ("/" for the root), owned by root:wheel.
type entry struct {
	path string
	// mode holds the type bits (modeDir, modeRegular) and the permissions.
	mode uint16
	data []byte
}

func (e entry) isDir() bool { return e.mode&modeDir != 0 }

// name is the entry's name in a cpio archive: "." or "./usr/local".
func (e entry) name() string {
	if e.path == "/" {
		return "."
	}
	return "." + e.path
}

// tree returns files with every parent directory (0755) up to "/", sorted
// so that each directory comes before what it holds.
func tree(files []entry) []entry {
	byPath := map[string]entry{"/": {path: "/", mode: modeDir | permExecutable}}
	for _, f := range files {
		byPath[f.path] = f
		for dir := path.Dir(f.path); dir != "/"; dir = path.Dir(dir) {
			byPath[dir] = entry{path: dir, mode: modeDir | permExecutable}
		}
	}
	entries := make([]entry, 0, len(byPath))
	for _, e := range byPath {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	return entries
}

// installKBytes is the space the payload takes, in KiB, counting each file
// in whole 4 KiB blocks as APFS allocates them; the installer checks the
// target has that much free.
func installKBytes(entries []entry) int64 {
	var kb int64
	for _, e := range entries {
		if !e.isDir() {
			kb += (int64(len(e.data)) + 4095) / 4096 * 4
		}
	}
	return kb
}

// postinstall is the script the installer runs as root after laying down
// the payload. The installer passes the target volume as $3: on a volume
// other than the running system's, launchd is not that system's, and the
// daemon starts at that system's next boot on its own.
func postinstall(label string) []byte {
	return fmt.Appendf(nil, `#!/bin/sh
# Start the LaunchDaemon %[1]s just installed, replacing a running one.
[ "$3" = "/" ] || exit 0
label=%[1]s
plist=%[2]s/%[1]s.plist
# bootstrap refuses a label launchd already has: take out a previous
# version's first.
/bin/launchctl bootout "system/$label" 2>/dev/null || true
/bin/launchctl enable "system/$label"
# bootout may return before launchd has let go of the label; retry briefly.
tries=0
until /bin/launchctl bootstrap system "$plist"; do
	tries=$((tries + 1))
	[ "$tries" -lt 10 ] || exit 1
	sleep 1
done
`, label, LaunchDaemonsDir)
}

// pkgInfo is a component package's PackageInfo.
type pkgInfo struct {
	XMLName         xml.Name `xml:"pkg-info"`
	FormatVersion   int      `xml:"format-version,attr"`
	Identifier      string   `xml:"identifier,attr"`
	Version         string   `xml:"version,attr"`
	InstallLocation string   `xml:"install-location,attr"`
	Auth            string   `xml:"auth,attr"`
	Payload         struct {
		NumberOfFiles int   `xml:"numberOfFiles,attr"`
		InstallKBytes int64 `xml:"installKBytes,attr"`
	} `xml:"payload"`
	Postinstall struct {
		File string `xml:"file,attr"`
	} `xml:"scripts>postinstall"`
}

// packageInfo describes the component: the payload's entries counted as
// `find . | wc -l` counts them, installed relative to "/" as root.
func packageInfo(o Options, numberOfFiles int, kbytes int64) ([]byte, error) {
	p := pkgInfo{FormatVersion: 2, Identifier: o.Identifier, Version: o.Version, InstallLocation: "/", Auth: "root"}
	p.Payload.NumberOfFiles = numberOfFiles
	p.Payload.InstallKBytes = kbytes
	p.Postinstall.File = "./postinstall"
	return marshalXML(p)
}

// The Distribution of a product archive of one component, as productbuild
// --synthesize writes it: one hidden choice installing the one pkg-ref.
type (
	distScript struct {
		XMLName        xml.Name `xml:"installer-gui-script"`
		MinSpecVersion string   `xml:"minSpecVersion,attr"`
		Title          string   `xml:"title"`
		Options        struct {
			Customize         string `xml:"customize,attr"`
			RequireScripts    string `xml:"require-scripts,attr"`
			HostArchitectures string `xml:"hostArchitectures,attr"`
		} `xml:"options"`
		Domains struct {
			Anywhere        string `xml:"enable_anywhere,attr"`
			CurrentUserHome string `xml:"enable_currentUserHome,attr"`
			LocalSystem     string `xml:"enable_localSystem,attr"`
		} `xml:"domains"`
		Outline distLine     `xml:"choices-outline>line"`
		Choices []distChoice `xml:"choice"`
		PkgRef  distPkgRef   `xml:"pkg-ref"`
	}
	distLine struct {
		Choice string     `xml:"choice,attr"`
		Lines  []distLine `xml:"line"`
	}
	distChoice struct {
		ID      string      `xml:"id,attr"`
		Visible string      `xml:"visible,attr,omitempty"`
		PkgRefs []distPkgID `xml:"pkg-ref"`
	}
	distPkgID struct {
		ID string `xml:"id,attr"`
	}
	distPkgRef struct {
		ID            string `xml:"id,attr"`
		Version       string `xml:"version,attr"`
		OnConclusion  string `xml:"onConclusion,attr"`
		InstallKBytes int64  `xml:"installKBytes,attr"`
		// Ref is the component, "#" and its name in the archive.
		Ref string `xml:",chardata"`
	}
)

// distribution is the product archive's Distribution: installable only on
// the local system (a LaunchDaemon is system-wide), no choices to make.
func distribution(o Options, kbytes int64) ([]byte, error) {
	var d distScript
	d.MinSpecVersion = "1"
	d.Title = "macvirt guest agent " + o.Version
	d.Options.Customize = "never"
	d.Options.RequireScripts = "false"
	d.Options.HostArchitectures = o.HostArchitectures
	if d.Options.HostArchitectures == "" {
		d.Options.HostArchitectures = DefaultHostArchitectures
	}
	d.Domains.Anywhere, d.Domains.CurrentUserHome, d.Domains.LocalSystem = "false", "false", "true"
	d.Outline = distLine{Choice: "default", Lines: []distLine{{Choice: o.Identifier}}}
	d.Choices = []distChoice{
		{ID: "default"},
		{ID: o.Identifier, Visible: "false", PkgRefs: []distPkgID{{ID: o.Identifier}}},
	}
	d.PkgRef = distPkgRef{ID: o.Identifier, Version: o.Version, OnConclusion: "none", InstallKBytes: kbytes, Ref: "#" + ComponentName}
	return marshalXML(d)
}

func marshalXML(v any) ([]byte, error) {
	b, err := xml.MarshalIndent(v, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("marshalling %T: %w", v, err)
	}
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	buf.Write(b)
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
