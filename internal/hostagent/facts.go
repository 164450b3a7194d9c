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

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MacFacts reads a Mac's chip (sysctl machdep.cpu.brand_string), macOS
// version (sw_vers), the free disk under dir, the DHCP lease time of the
// VMs' shared network, who is logged in at its screen (the owner of
// /dev/console) and automatically (loginwindow's autoLoginUser), and
// whether it runs VMs (kern.hv_support). What cannot be read is left
// empty.
func MacFacts(dir string) func(ctx context.Context) Facts {
	return func(ctx context.Context) Facts {
		f := Facts{
			Chip:         output(ctx, "sysctl", "-n", "machdep.cpu.brand_string"),
			MacOSVersion: output(ctx, "sw_vers", "-productVersion"),
		}
		f.DHCPLease, f.DHCPLeaseSource = dhcpLease(ctx)
		if u, err := user.Current(); err == nil {
			f.User = u.Username
		}
		if runtime.GOOS == "darwin" {
			f.ConsoleUser = output(ctx, "stat", "-f", "%Su", "/dev/console")
			f.AutoLoginUser = output(ctx, "defaults", "read", "/Library/Preferences/com.apple.loginwindow", "autoLoginUser")
			f.HVSupport = output(ctx, "sysctl", "-n", "kern.hv_support")
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			f.FreeDisk = resource.NewQuantity(int64(st.Bavail)*int64(st.Bsize), resource.BinarySI) //nolint:gosec,unconvert // block counts fit.
		}
		return f
	}
}

func output(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output() //nolint:gosec // fixed commands of macOS (sysctl, sw_vers).
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// internetSharing is the plist of macOS's shared network (vmnet's NAT,
// which both tools' VMs use); its bootpd dictionary configures the DHCP
// server. Orchard checks the same key.
const internetSharing = "/Library/Preferences/SystemConfiguration/com.apple.InternetSharing.default.plist"

// macOSDefaultDHCPLease is bootpd's lease when the plist does not set one.
const macOSDefaultDHCPLease = 24 * time.Hour

// dhcpLease reads bootpd's DHCPLeaseTimeSecs with plutil; a missing file
// or key is macOS's default of a day. Off macOS, or when the plist cannot
// be read, the lease is unknown (0) and the second value says why.
func dhcpLease(ctx context.Context) (time.Duration, string) {
	if runtime.GOOS != "darwin" {
		return 0, "not macOS"
	}
	if _, err := os.Stat(internetSharing); errors.Is(err, os.ErrNotExist) {
		return macOSDefaultDHCPLease, "macOS's default (" + internetSharing + " does not exist)"
	} else if err != nil {
		return 0, err.Error()
	}
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "plutil", "-extract", "bootpd.DHCPLeaseTimeSecs", "raw", "-o", "-", internetSharing)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	switch {
	case ctx.Err() != nil:
		return 0, ctx.Err().Error()
	case err != nil && strings.Contains(stderr.String()+string(out), "No value at that key path"):
		return macOSDefaultDHCPLease, "macOS's default (" + internetSharing + " sets no bootpd DHCPLeaseTimeSecs)"
	case err != nil:
		return 0, fmt.Sprintf("plutil -extract bootpd.DHCPLeaseTimeSecs %s: %v: %s", internetSharing, err, strings.TrimSpace(stderr.String()+string(out)))
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || secs <= 0 {
		return 0, fmt.Sprintf("%s bootpd DHCPLeaseTimeSecs is %q", internetSharing, strings.TrimSpace(string(out)))
	}
	return time.Duration(secs) * time.Second, internetSharing + " bootpd DHCPLeaseTimeSecs"
}
