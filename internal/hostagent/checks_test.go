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
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Each check of the Mac, as the doctor prints it and the agent reports
// it; the fix is said wherever something is to be done.
func TestChecks(t *testing.T) {
	gib := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	for name, tc := range map[string]struct {
		got  Finding
		want Verdict
		says string
	}{
		"tart as followed":                       {CheckToolVersion("tart", "2.32.1\n"), VerdictOK, "tart 2.32.1"},
		"a newer tart":                           {CheckToolVersion("tart", "2.40.0"), VerdictOK, "2.40.0"},
		"an older tart":                          {CheckToolVersion("tart", "2.18.4"), VerdictWarning, "brew upgrade tart"},
		"lume as it prints itself":               {CheckToolVersion("lume", "lume v0.5.3"), VerdictOK, "lume 0.5.3"},
		"an older lume":                          {CheckToolVersion("lume", "0.4.9"), VerdictWarning, "older than 0.5.3"},
		"a version that is not one":              {CheckToolVersion("tart", "dev"), VerdictUnknown, "could not be read"},
		"the user logged in, automatically":      {CheckLoginSession("ci", "ci", "ci"), VerdictOK, "logged in automatically"},
		"the login window":                       {CheckLoginSession("ci", "root", "ci"), VerdictFailed, "no one (the login window)"},
		"another user at the screen":             {CheckLoginSession("ci", "admin", "admin"), VerdictFailed, "Automatically log in as ci"},
		"logged in, but not after a reboot":      {CheckLoginSession("ci", "ci", ""), VerdictWarning, "logs in no one automatically"},
		"not a Mac":                              {CheckLoginSession("ci", "", ""), VerdictUnknown, "could not be read"},
		"a DHCP lease not read":                  {CheckDHCPLease(0, "the plist"), VerdictUnknown, "could not be read: the plist"},
		"macOS's default lease, a day":           {CheckDHCPLease(24*time.Hour, "the plist"), VerdictWarning, "DHCPLeaseTimeSecs -int 600"},
		"a lease just over an hour":              {CheckDHCPLease(time.Hour+time.Second, "the plist"), VerdictWarning, "sudo rm /var/db/dhcpd_leases"},
		"a lease of an hour":                     {CheckDHCPLease(time.Hour, "the plist"), VerdictOK, "1h0m0s"},
		"a lease of ten minutes, as advised":     {CheckDHCPLease(10*time.Minute, "the plist"), VerdictOK, "10m0s"},
		"enough disk":                            {CheckFreeDisk(gib(200), *gib(60)), VerdictOK, "200.0Gi free"},
		"too little disk":                        {CheckFreeDisk(gib(20), *gib(60)), VerdictFailed, "--min-free-disk"},
		"disk not read":                          {CheckFreeDisk(nil, *gib(60)), VerdictUnknown, "could not be read"},
		"a Mac that runs VMs":                    {CheckVirtualization("1\n"), VerdictOK, "kern.hv_support 1"},
		"a VM without nested virtualization":     {CheckVirtualization("0"), VerdictFailed, "not a VM"},
		"Local Network, which no command reads":  {CheckLocalNetwork("tart"), VerdictManual, "Privacy & Security > Local Network"},
		"a LaunchDaemon without HOME":            {CheckEnvironment("", "", "tart", nil), VerdictFailed, "EnvironmentVariables"},
		"a PATH without Homebrew":                {CheckEnvironment("/Users/ci", "", "tart", errors.New("executable file not found in $PATH")), VerdictFailed, "/opt/homebrew/bin"},
		"lume without the guests' administrator": {CheckLumeShutdown(""), VerdictWarning, "--lume-guest-user"},
		"lume with it":                           {CheckLumeShutdown("admin"), VerdictOK, "lume shutdown as admin"},
		"an environment as needed":               {CheckEnvironment("/Users/ci", "/opt/homebrew/bin/tart", "tart", nil), VerdictOK, "/opt/homebrew/bin/tart"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.got.Verdict != tc.want || !strings.Contains(tc.got.Message+" "+tc.got.Fix, tc.says) {
				t.Errorf("= %s %q (fix %q); want %s, saying %q", tc.got.Verdict, tc.got.Message, tc.got.Fix, tc.want, tc.says)
			}
			if (tc.got.Verdict == VerdictWarning || tc.got.Verdict == VerdictFailed || tc.got.Verdict == VerdictManual) && tc.got.Fix == "" {
				t.Errorf("%s with no fix", tc.got.Verdict)
			}
		})
	}
}

// A finding becomes a MacHost condition True while its problem holds,
// with the fix in the message.
func TestProblemCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		f      Finding
		status metav1.ConditionStatus
		reason string
	}{
		"passed":    {Finding{Verdict: VerdictOK, Message: "fine"}, metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected},
		"a warning": {Finding{Verdict: VerdictWarning, Message: "long", Fix: "shorten it"}, metav1.ConditionTrue, macvirtv1alpha1.HostConditionDHCPLeaseTooLong},
		"a failure": {Finding{Verdict: VerdictFailed, Message: "bad", Fix: "mend it"}, metav1.ConditionTrue, macvirtv1alpha1.HostConditionDHCPLeaseTooLong},
		"not read":  {Finding{Verdict: VerdictUnknown, Message: "?"}, metav1.ConditionUnknown, "NotRead"},
	} {
		t.Run(name, func(t *testing.T) {
			status, reason, msg := problemCondition(macvirtv1alpha1.HostConditionDHCPLeaseTooLong, tc.f)
			if status != tc.status || reason != tc.reason || !strings.Contains(msg, tc.f.Fix) {
				t.Errorf("= %s %s %q; want %s %s with the fix", status, reason, msg, tc.status, tc.reason)
			}
		})
	}
}
