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
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// Fixtures.

// launchDaemonPlist is a LaunchDaemon property list of label running
// program.
func launchDaemonPlist(label, program string) []byte {
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + label + `</string>
	<key>ProgramArguments</key>
	<array>
		<string>` + program + `</string>
		<string>-v</string>
	</array>
	<key>KeepAlive</key>
	<true/>
	<key>EnvironmentVariables</key>
	<dict><key>Label</key><string>not this one</string></dict>
</dict>
</plist>
`)
}

var fakeAgent = []byte("\xcf\xfa\xed\xfe not really a Mach-O binary, but bytes enough to check: " + strings.Repeat("agent ", 1000))

func testOptions() Options {
	return Options{
		Identifier:   "io.macvirt.agent",
		Version:      "1.2.3",
		Agent:        fakeAgent,
		LaunchDaemon: launchDaemonPlist("io.macvirt.agent", AgentPath),
		ModTime:      time.Unix(1700000000, 0),
	}
}

func build(t *testing.T, o Options) []byte {
	t.Helper()
	pkg, err := Build(o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return pkg
}

func read(t *testing.T, pkg []byte) *xarRead {
	t.Helper()
	x, err := readXar(pkg)
	if err != nil {
		t.Fatalf("reading the package back: %v", err)
	}
	return x
}

func payload(t *testing.T, x *xarRead, name string) []cpioEntry {
	t.Helper()
	entries, err := readGzipODC(x.files["macvirt-agent.pkg/"+name])
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return entries
}

// wantPayload are the payload's entries: name, mode (with type bits).
var wantPayload = []struct {
	name string
	mode int64
}{
	{".", 0o40755},
	{"./Library", 0o40755},
	{"./Library/LaunchDaemons", 0o40755},
	{"./Library/LaunchDaemons/io.macvirt.agent.plist", 0o100644},
	{"./usr", 0o40755},
	{"./usr/local", 0o40755},
	{"./usr/local/libexec", 0o40755},
	{"./usr/local/libexec/macvirt-agent", 0o100755},
}

func TestPackageIsAXarArchiveOfOneComponent(t *testing.T) {
	x := read(t, build(t, testOptions()))
	if x.headerSize != 28 || x.version != 1 || x.cksumAlg != 1 || x.tocChecksumStyle != "sha1" {
		t.Errorf("header size %d, version %d, checksum algorithm %d (TOC says %q); want 28, 1, 1 (sha1)",
			x.headerSize, x.version, x.cksumAlg, x.tocChecksumStyle)
	}
	var paths []string
	for p, e := range x.entries {
		paths = append(paths, p+" "+e.Type+" "+e.Mode)
		if e.UID != 0 || e.GID != 0 || e.User != "root" || e.Group != "wheel" {
			t.Errorf("%s is owned by %s(%d):%s(%d), want root:wheel", p, e.User, e.UID, e.Group, e.GID)
		}
	}
	slices.Sort(paths)
	want := []string{
		"Distribution file 0644",
		"macvirt-agent.pkg directory 0755",
		"macvirt-agent.pkg/Bom file 0644",
		"macvirt-agent.pkg/PackageInfo file 0644",
		"macvirt-agent.pkg/Payload file 0644",
		"macvirt-agent.pkg/Scripts file 0644",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("archive holds\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
	}
}

func TestPayloadInstallsTheAgentAndItsLaunchDaemonAsRoot(t *testing.T) {
	o := testOptions()
	entries := payload(t, read(t, build(t, o)), "Payload")
	if len(entries) != len(wantPayload) {
		t.Fatalf("payload has %d entries, want %d", len(entries), len(wantPayload))
	}
	inodes := map[int64]bool{}
	for i, e := range entries {
		if e.name != wantPayload[i].name || e.mode != wantPayload[i].mode {
			t.Errorf("entry %d is %s %o, want %s %o", i, e.name, e.mode, wantPayload[i].name, wantPayload[i].mode)
		}
		if e.uid != 0 || e.gid != 0 || e.mtime != o.ModTime.Unix() {
			t.Errorf("%s: uid %d gid %d mtime %d, want 0 0 %d", e.name, e.uid, e.gid, e.mtime, o.ModTime.Unix())
		}
		if inodes[e.ino] {
			t.Errorf("%s: inode %d is another entry's too (a reader would take a hard link)", e.name, e.ino)
		}
		inodes[e.ino] = true
	}
	byName := map[string][]byte{}
	for _, e := range entries {
		byName[e.name] = e.data
	}
	if !bytes.Equal(byName["./usr/local/libexec/macvirt-agent"], o.Agent) {
		t.Error("the installed agent is not the agent binary")
	}
	if !bytes.Equal(byName["./Library/LaunchDaemons/io.macvirt.agent.plist"], o.LaunchDaemon) {
		t.Error("the installed LaunchDaemon is not the plist given")
	}
}

func TestPostinstallBootstrapsTheLaunchDaemonAfterBootingOutTheOldOne(t *testing.T) {
	entries := payload(t, read(t, build(t, testOptions())), "Scripts")
	if len(entries) != 2 || entries[0].name != "." || entries[1].name != "./postinstall" {
		t.Fatalf("Scripts holds %v, want . and ./postinstall", entries)
	}
	script := entries[1]
	if script.mode != 0o100755 || script.uid != 0 || script.gid != 0 {
		t.Errorf("postinstall is %o %d:%d, want 100755 0:0", script.mode, script.uid, script.gid)
	}
	s := string(script.data)
	bootout := strings.Index(s, `launchctl bootout "system/$label"`)
	bootstrap := strings.Index(s, `launchctl bootstrap system "$plist"`)
	if !strings.HasPrefix(s, "#!/bin/sh\n") || !strings.Contains(s, "\nlabel=io.macvirt.agent\n") ||
		!strings.Contains(s, "\nplist=/Library/LaunchDaemons/io.macvirt.agent.plist\n") ||
		bootout < 0 || bootstrap < bootout {
		t.Errorf("postinstall does not boot out io.macvirt.agent, then bootstrap its plist:\n%s", s)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh here to check the script's syntax")
	}
	if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil { //nolint:gosec // the sh on PATH, checking the script.
		t.Errorf("sh -n: %v: %s", err, out)
	}
}

func TestPackageInfoDescribesThePayloadAndItsScript(t *testing.T) {
	x := read(t, build(t, testOptions()))
	var info struct {
		FormatVersion   string `xml:"format-version,attr"`
		Identifier      string `xml:"identifier,attr"`
		Version         string `xml:"version,attr"`
		InstallLocation string `xml:"install-location,attr"`
		Auth            string `xml:"auth,attr"`
		Payload         struct {
			NumberOfFiles int `xml:"numberOfFiles,attr"`
			InstallKBytes int `xml:"installKBytes,attr"`
		} `xml:"payload"`
		Postinstall struct {
			File string `xml:"file,attr"`
		} `xml:"scripts>postinstall"`
	}
	if err := xml.Unmarshal(x.files["macvirt-agent.pkg/PackageInfo"], &info); err != nil {
		t.Fatal(err)
	}
	if info.FormatVersion != "2" || info.Identifier != "io.macvirt.agent" || info.Version != "1.2.3" ||
		info.InstallLocation != "/" || info.Auth != "root" || info.Postinstall.File != "./postinstall" {
		t.Errorf("PackageInfo = %+v", info)
	}
	if info.Payload.NumberOfFiles != len(wantPayload) {
		t.Errorf("numberOfFiles = %d, want %d (every payload entry)", info.Payload.NumberOfFiles, len(wantPayload))
	}
	if least := (len(fakeAgent) + len(testOptions().LaunchDaemon)) / 1024; info.Payload.InstallKBytes < least {
		t.Errorf("installKBytes = %d, less than the files' %d KiB", info.Payload.InstallKBytes, least)
	}
}

func TestDistributionInstallsTheOneComponentOnTheLocalSystem(t *testing.T) {
	x := read(t, build(t, testOptions()))
	var dist struct {
		XMLName xml.Name
		Options struct {
			HostArchitectures string `xml:"hostArchitectures,attr"`
			Customize         string `xml:"customize,attr"`
		} `xml:"options"`
		Domains struct {
			LocalSystem string `xml:"enable_localSystem,attr"`
		} `xml:"domains"`
		Outline []struct {
			Lines []struct {
				Choice string `xml:"choice,attr"`
			} `xml:"line"`
		} `xml:"choices-outline>line"`
		Choices []struct {
			ID      string `xml:"id,attr"`
			PkgRefs []struct {
				ID string `xml:"id,attr"`
			} `xml:"pkg-ref"`
		} `xml:"choice"`
		PkgRefs []struct {
			ID            string `xml:"id,attr"`
			Version       string `xml:"version,attr"`
			InstallKBytes string `xml:"installKBytes,attr"`
			Ref           string `xml:",chardata"`
		} `xml:"pkg-ref"`
	}
	if err := xml.Unmarshal(x.files["Distribution"], &dist); err != nil {
		t.Fatal(err)
	}
	if dist.XMLName.Local != "installer-gui-script" || dist.Options.HostArchitectures != "x86_64" ||
		dist.Options.Customize != "never" || dist.Domains.LocalSystem != "true" {
		t.Errorf("Distribution = %+v", dist)
	}
	if len(dist.PkgRefs) != 1 || dist.PkgRefs[0].ID != "io.macvirt.agent" || dist.PkgRefs[0].Version != "1.2.3" ||
		dist.PkgRefs[0].Ref != "#macvirt-agent.pkg" {
		t.Fatalf("pkg-refs = %+v, want one of io.macvirt.agent 1.2.3 at #macvirt-agent.pkg", dist.PkgRefs)
	}
	if !strings.Contains(string(x.files["macvirt-agent.pkg/PackageInfo"]), `installKBytes="`+dist.PkgRefs[0].InstallKBytes+`"`) {
		t.Errorf("pkg-ref installKBytes %s is not PackageInfo's", dist.PkgRefs[0].InstallKBytes)
	}
	var outlined, chosen bool
	for _, l := range dist.Outline {
		for _, c := range l.Lines {
			outlined = outlined || c.Choice == "io.macvirt.agent"
		}
	}
	for _, c := range dist.Choices {
		chosen = chosen || c.ID == "io.macvirt.agent" && len(c.PkgRefs) == 1 && c.PkgRefs[0].ID == "io.macvirt.agent"
	}
	if !outlined || !chosen {
		t.Errorf("no choice in the outline installs the pkg-ref: outline %+v, choices %+v", dist.Outline, dist.Choices)
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	o := testOptions()
	first, second := build(t, o), build(t, o)
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same inputs differ")
	}
	o.ModTime = o.ModTime.Add(time.Second)
	if bytes.Equal(first, build(t, o)) {
		t.Error("a build at another time is the same: ModTime is not in the package")
	}
}

func TestACorruptedByteFailsTheChecksums(t *testing.T) {
	pkg := build(t, testOptions())
	x := read(t, pkg)
	data := x.entries["macvirt-agent.pkg/Payload"].Data
	for name, at := range map[string]int64{
		"a Payload byte":          x.heapStart + data.Offset + data.Length/2,
		"the TOC checksum":        x.heapStart,
		"the Payload's last byte": x.heapStart + data.Offset + data.Length - 1,
	} {
		corrupt := bytes.Clone(pkg)
		corrupt[at] ^= 0xff
		if _, err := readXar(corrupt); err == nil || !strings.Contains(err.Error(), "checksum") {
			t.Errorf("%s corrupted: read back with error %v, want a checksum mismatch", name, err)
		}
	}
}

func TestBuildRefusesWhatItCannotPackage(t *testing.T) {
	tests := map[string]func(*Options){
		"a LaunchDaemon running another path": func(o *Options) {
			o.LaunchDaemon = launchDaemonPlist("io.macvirt.agent", "/usr/local/bin/macvirt-agent")
		},
		"a LaunchDaemon with no label": func(o *Options) { o.LaunchDaemon = launchDaemonPlist("", AgentPath) },
		"a label that is no file name": func(o *Options) { o.LaunchDaemon = launchDaemonPlist("../evil", AgentPath) },
		"a file that is no plist":      func(o *Options) { o.LaunchDaemon = []byte("Label=io.macvirt.agent") },
		"no agent":                     func(o *Options) { o.Agent = nil },
		"no version":                   func(o *Options) { o.Version = "" },
		"a version with a quote":       func(o *Options) { o.Version = `1"2` },
		"an identifier with a space":   func(o *Options) { o.Identifier = "io.macvirt agent" },
		"a time before 1970":           func(o *Options) { o.ModTime = time.Unix(-1, 0) },
		"a time after 2106":            func(o *Options) { o.ModTime = time.Unix(1<<32, 0) },
		"architectures with spaces":    func(o *Options) { o.HostArchitectures = "x86_64, arm64" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			o := testOptions()
			mutate(&o)
			if _, err := Build(o); err == nil {
				t.Error("Build succeeded")
			}
		})
	}
}

// writePackage writes a package of the test options for an outside tool.
func writePackage(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/macvirt-agent.pkg"
	if err := os.WriteFile(p, build(t, testOptions()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
