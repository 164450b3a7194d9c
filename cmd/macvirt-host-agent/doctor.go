package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/macvirt/macvirt/internal/hostagent"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/hostagent/vz/lume"
	"github.com/macvirt/macvirt/internal/hostagent/vz/tart"
)

// doctorFlags are the agent's flags the doctor checks with.
type doctorFlags struct {
	host, tool, lumeURL, lume, tart, stateDir, minFreeDisk string
	lumeGuestUser                                          string
	kubeconfig, endpoint, endpointCA, serverName           string
}

// errDoctorFailed makes the doctor exit 1 after its table.
var errDoctorFailed = errors.New("a check FAILED: fix it, and run the doctor again")

// runDoctor checks the Mac as the agent would run on it, prints what it
// found and how to fix it, and fails when any check did.
func runDoctor(f doctorFlags) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var findings []hostagent.Finding
	add := func(fs ...hostagent.Finding) { findings = append(findings, fs...) }

	var driver vz.Driver
	switch f.tool {
	case "tart":
		path, err := exec.LookPath(f.tart)
		home := os.Getenv("HOME")
		if home == "" {
			// tart keeps its VMs under TART_HOME when set, ~/.tart else.
			home = os.Getenv("TART_HOME")
		}
		add(hostagent.CheckEnvironment(home, path, "tart", err))
		driver = tart.New(f.tart, filepath.Join(f.stateDir, "tart"))
	case "lume":
		add(hostagent.CheckEnvironment(os.Getenv("HOME"), f.lumeURL, "lume", nil), hostagent.CheckLumeShutdown(f.lumeGuestUser))
		ld := lume.New(f.lumeURL)
		ld.Binary = f.lume
		driver = ld
	default:
		return fmt.Errorf("--tool %q: give lume or tart", f.tool)
	}
	slots, err := driver.Slots(ctx)
	add(hostagent.CheckToolReachable(f.tool, slots, err))
	add(toolVersion(ctx, driver))

	minFree, err := resource.ParseQuantity(f.minFreeDisk)
	if err != nil {
		return fmt.Errorf("--min-free-disk %q: %w", f.minFreeDisk, err)
	}
	facts := hostagent.MacFacts(f.stateDir)(ctx)
	add(hostagent.CheckVirtualization(facts.HVSupport),
		hostagent.CheckLoginSession(facts.User, facts.ConsoleUser, facts.AutoLoginUser),
		hostagent.CheckLocalNetwork(f.tool),
		hostagent.CheckDHCPLease(facts.DHCPLease, facts.DHCPLeaseSource),
		hostagent.CheckFreeDisk(facts.FreeDisk, minFree))

	who, err := identity(ctx, f.kubeconfig)
	add(hostagent.CheckIdentity(who, f.host, err))
	add(hostagent.CheckEndpoint(f.endpoint, endpoint(ctx, f)))

	fmt.Printf("macvirt-host-agent %s, doctor of MacHost %s (%s)\n", version, f.host, f.tool)
	if hostagent.PrintFindings(os.Stdout, findings) {
		return errDoctorFailed
	}
	return nil
}

// toolVersion reads the tool's version from the driver (lume's from its
// command, since its API does not say).
func toolVersion(ctx context.Context, d vz.Driver) hostagent.Finding {
	v, err := d.Version(ctx)
	if err != nil {
		return hostagent.Finding{Check: "tool version", Verdict: hostagent.VerdictUnknown, Message: err.Error()}
	}
	return hostagent.CheckToolVersion(d.Name(), v)
}

// identity asks the API server who the kubeconfig is (SelfSubjectReview).
func identity(ctx context.Context, kubeconfig string) (string, error) {
	if kubeconfig == "" {
		return "", errors.New("--kubeconfig is not given")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	if _, err := hostToken(cfg); err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

func endpoint(ctx context.Context, f doctorFlags) error {
	if f.endpoint == "" || f.endpointCA == "" {
		return errors.New("--endpoint and --endpoint-ca are required")
	}
	ca, err := os.ReadFile(f.endpointCA)
	if err != nil {
		return fmt.Errorf("reading --endpoint-ca: %w", err)
	}
	return hostagent.ProbeEndpoint(ctx, f.endpoint, ca, f.serverName)
}
