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
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// Verdict is how a check of the Mac came out.
type Verdict string

// Verdicts, from best to worst.
const (
	// VerdictOK: as macvirt needs it.
	VerdictOK Verdict = "ok"
	// VerdictManual: only a person at the Mac can check it; the fix says
	// where.
	VerdictManual Verdict = "check"
	// VerdictUnknown: it could not be read.
	VerdictUnknown Verdict = "unknown"
	// VerdictWarning: it works, but will hurt (a long DHCP lease, an old
	// tool).
	VerdictWarning Verdict = "warning"
	// VerdictFailed: machines will not run on the Mac until it is fixed.
	VerdictFailed Verdict = "FAILED"
)

// Finding is one check of the Mac: the doctor prints it, and the agent
// reports the ones it can read as MacHost conditions. Each is decided in
// one function below, for both.
type Finding struct {
	Check   string
	Verdict Verdict
	// Message says what was found; Fix what to do, when anything.
	Message, Fix string
}

// FollowedVersions are the tool versions whose source the host agent
// follows: their commands, output, routes and errors.
var FollowedVersions = map[string]string{"tart": "2.32.1", "lume": "0.5.3"}

// CheckToolVersion compares the tool's version (as "tart --version" or
// "lume --version" prints it) with the one the agent follows.
func CheckToolVersion(tool, version string) Finding {
	f := Finding{Check: "tool version"}
	want := FollowedVersions[tool]
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	if i := strings.LastIndex(v, " "); i >= 0 {
		// "lume v0.5.3" and the like.
		v = strings.TrimPrefix(v[i+1:], "v")
	}
	cmp, ok := compareVersions(v, want)
	switch {
	case want == "":
		f.Verdict, f.Message = VerdictUnknown, fmt.Sprintf("unknown tool %q", tool)
	case !ok:
		f.Verdict, f.Message = VerdictUnknown, fmt.Sprintf("%s's version %q could not be read", tool, version)
		f.Fix = fmt.Sprintf("check that %s --version runs for the agent's user", tool)
	case cmp < 0:
		f.Verdict, f.Message = VerdictWarning, fmt.Sprintf("%s %s is older than %s, the version the host agent follows", tool, v, want)
		f.Fix = "upgrade it (brew upgrade " + tool + ")"
	default:
		f.Verdict, f.Message = VerdictOK, fmt.Sprintf("%s %s (the agent follows %s)", tool, v, want)
	}
	return f
}

// compareVersions compares dotted versions numerically; false when either
// is not one.
func compareVersions(a, b string) (int, bool) {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		x, y := 0, 0
		var err error
		if i < len(pa) {
			if x, err = strconv.Atoi(pa[i]); err != nil {
				return 0, false
			}
		}
		if i < len(pb) {
			if y, err = strconv.Atoi(pb[i]); err != nil {
				return 0, false
			}
		}
		if x != y {
			if x < y {
				return -1, true
			}
			return 1, true
		}
	}
	return 0, a != "" && b != ""
}

// CheckLoginSession says whether the tool's user (the agent's) has the
// GUI session the Virtualization framework needs to start a macOS 15.2 or
// later guest, from who owns the console ("root" at the login window) and
// whom macOS logs in automatically after a reboot. Empty console: not
// read (not macOS).
func CheckLoginSession(user, console, autoLogin string) Finding {
	f := Finding{Check: "login session"}
	fix := fmt.Sprintf("log %s in automatically: System Settings > Users & Groups > Automatically log in as %s, then reboot or log in once", user, user)
	switch {
	case console == "":
		f.Verdict, f.Message = VerdictUnknown, "who is logged in at the Mac's screen could not be read"
	case console != user:
		who := "no one (the login window)"
		if console != "root" {
			who = console
		}
		f.Verdict, f.Fix = VerdictFailed, fix
		f.Message = fmt.Sprintf("%s is logged in at the Mac's screen, not %s, the user the tool runs as: "+
			"the Virtualization framework starts no macOS 15.2 or later guest for a user without a GUI session", who, user)
	case autoLogin != user:
		f.Verdict, f.Fix = VerdictWarning, fix
		f.Message = fmt.Sprintf("%s is logged in now, but macOS logs in %s automatically after a reboot", user, orNobody(autoLogin))
	default:
		f.Verdict, f.Message = VerdictOK, fmt.Sprintf("%s is logged in, and is logged in automatically after a reboot", user)
	}
	return f
}

func orNobody(s string) string {
	if s == "" {
		return "no one"
	}
	return s
}

// CheckDHCPLease says whether the VMs' DHCP lease is short enough for a
// Mac that makes and deletes VMs all day (Orchard warns past an hour).
func CheckDHCPLease(lease time.Duration, source string) Finding {
	f := Finding{Check: "DHCP lease"}
	switch {
	case lease == 0:
		f.Verdict, f.Message = VerdictUnknown, "the DHCP lease time of the VMs' network could not be read: "+source
	case lease > maxDHCPLease:
		f.Verdict = VerdictWarning
		f.Message = fmt.Sprintf("the VMs' DHCP leases last %s (%s), longer than %s: with VMs made and deleted all day the Mac runs out of addresses "+
			"and new VMs get none", lease, source, maxDHCPLease)
		f.Fix = fmt.Sprintf("sudo defaults write %s bootpd -dict DHCPLeaseTimeSecs -int 600 "+
			"(and sudo rm /var/db/dhcpd_leases if leases have piled up)", internetSharing)
	default:
		f.Verdict, f.Message = VerdictOK, fmt.Sprintf("the VMs' DHCP leases last %s (%s)", lease, source)
	}
	return f
}

// CheckFreeDisk says whether a new VM fits where the tool keeps its VMs.
func CheckFreeDisk(free *resource.Quantity, minFree resource.Quantity) Finding {
	f := Finding{Check: "free disk"}
	switch {
	case free == nil:
		f.Verdict, f.Message = VerdictUnknown, "the free disk could not be read"
	case free.Cmp(minFree) < 0:
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("%s free, under the %s a new VM needs", gib(free), minFree.String())
		f.Fix = "free disk (tart prune, lume prune, old VMs), or lower --min-free-disk"
	default:
		f.Verdict, f.Message = VerdictOK, fmt.Sprintf("%s free (a new VM needs %s)", gib(free), minFree.String())
	}
	return f
}

// gib is a size in GiB with one decimal, as a person reads it.
func gib(q *resource.Quantity) string {
	return fmt.Sprintf("%.1fGi", float64(q.Value())/(1<<30))
}

// CheckVirtualization says whether the Mac runs virtual machines at all
// (sysctl kern.hv_support): not in a VM without nested virtualization,
// nor on an Intel Mac without it.
func CheckVirtualization(hvSupport string) Finding {
	f := Finding{Check: "virtualization"}
	switch strings.TrimSpace(hvSupport) {
	case "1":
		f.Verdict, f.Message = VerdictOK, "the Mac supports the Virtualization framework (kern.hv_support 1)"
	case "":
		f.Verdict, f.Message = VerdictUnknown, "kern.hv_support could not be read"
	default:
		f.Verdict, f.Message = VerdictFailed, "the Mac does not support the Virtualization framework (kern.hv_support "+strings.TrimSpace(hvSupport)+")"
		f.Fix = "use an Apple-silicon Mac, not a VM"
	}
	return f
}

// CheckLocalNetwork is the Local Network permission, which macOS 15 and
// later ask for in a dialog and keep where no command reads it.
func CheckLocalNetwork(tool string) Finding {
	return Finding{Check: "Local Network", Verdict: VerdictManual,
		Message: "macOS 15 and later ask whether " + tool + " may use the local network, in a dialog; no command can read the answer",
		Fix:     "in System Settings > Privacy & Security > Local Network, allow " + tool + " (hack/smoke-apple-silicon.sh shows it: without it a guest gets no address)"}
}

// CheckEnvironment says whether the agent's environment lets it run the
// tool: HOME (where tart keeps its VMs) and the tool found on PATH.
func CheckEnvironment(home, toolPath, tool string, lookErr error) Finding {
	f := Finding{Check: "environment"}
	switch {
	case home == "":
		f.Verdict, f.Message = VerdictFailed, "HOME is not set (launchd gives a LaunchDaemon none)"
		f.Fix = "set HOME in the LaunchDaemon's EnvironmentVariables (docs/apple-silicon-hosts.md)"
	case lookErr != nil:
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("%s is not found: %v", tool, lookErr)
		f.Fix = "give its full path (--tart /opt/homebrew/bin/tart), or add /opt/homebrew/bin to PATH in the LaunchDaemon"
	default:
		f.Verdict, f.Message = VerdictOK, fmt.Sprintf("HOME is %s; %s is %s", home, tool, toolPath)
	}
	return f
}

// CheckToolReachable says whether the tool answers (tart list, lume's
// host status).
func CheckToolReachable(tool string, slots vz.Slots, err error) Finding {
	f := Finding{Check: "tool"}
	if err != nil {
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("%s does not answer: %v", tool, err)
		f.Fix = "for tart, run it as the agent's user (tart list); for lume, start lume serve (docs/apple-silicon-hosts.md)"
		return f
	}
	f.Verdict, f.Message = VerdictOK, fmt.Sprintf("%s answers: %d of %d VMs run", tool, slots.Running, slots.Max)
	return f
}

// CheckIdentity says whether the kubeconfig is the host's ServiceAccount,
// the only identity the operator's endpoint and admission policy accept
// for the Mac.
func CheckIdentity(username, host string, err error) Finding {
	f := Finding{Check: "identity"}
	want := "system:serviceaccount:" + macvirtv1alpha1.HostAgentNamespace + ":" + host
	switch {
	case err != nil:
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("the API server did not say who the kubeconfig is: %v", err)
		f.Fix = "check --kubeconfig: the cluster's address, its CA, and a token that has not expired"
	case username != want:
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("the kubeconfig is %s, not %s", username, want)
		f.Fix = fmt.Sprintf("use a token of the ServiceAccount %s in %s, or give --host its name", host, macvirtv1alpha1.HostAgentNamespace)
	default:
		f.Verdict, f.Message = VerdictOK, "the kubeconfig is "+username
	}
	return f
}

// CheckEndpoint says whether the operator's agent endpoint answers over
// TLS with a certificate the given CA vouches for.
func CheckEndpoint(url string, err error) Finding {
	f := Finding{Check: "agent endpoint"}
	if err != nil {
		f.Verdict, f.Message = VerdictFailed, fmt.Sprintf("%s: %v", url, err)
		f.Fix = "check --endpoint (an address this Mac and its VMs reach), --endpoint-ca and --endpoint-server-name"
		return f
	}
	f.Verdict, f.Message = VerdictOK, url+" answers with a certificate the CA vouches for"
	return f
}

// PrintFindings writes the findings as a table, each fix under its check,
// and says whether any failed.
func PrintFindings(w io.Writer, findings []Finding) (failed bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "CHECK\tRESULT\tFOUND")
	for _, f := range findings {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Check, f.Verdict, f.Message)
		if f.Fix != "" && f.Verdict != VerdictOK {
			_, _ = fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
		failed = failed || f.Verdict == VerdictFailed
	}
	_ = tw.Flush()
	return failed
}

// CheckLumeShutdown says how macOS is asked to shut down on lume: through
// the guest agent's share always, and with "lume shutdown" (SSH) too when
// the agent has the guests' administrator.
func CheckLumeShutdown(guestUser string) Finding {
	f := Finding{Check: "graceful stop"}
	if guestUser == "" {
		f.Verdict = VerdictWarning
		f.Message = "only the guest agent is asked to shut macOS down (its share): a guest whose agent is missing or hung keeps its slot until someone shuts it down"
		f.Fix = "give --lume-guest-user and --lume-guest-password-file (the images' administrator, with Remote Login on), so lume shutdown asks too"
		return f
	}
	f.Verdict = VerdictOK
	f.Message = "macOS is asked through the guest agent's share and with lume shutdown as " + guestUser
	return f
}
