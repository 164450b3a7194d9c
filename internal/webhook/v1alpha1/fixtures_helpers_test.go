package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// testKey is a well-formed ed25519 public key.
const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGjmcsp0y1ajFmlpJ0mBQhnEkcA0nfDy8cE8gSOVUiOK dev@example"

func strPtr(s string) *string { return &s }
func i32(v int32) *int32      { return &v }

// minimalClass is the smallest valid class: its two disks.
func minimalClass() *macvirtv1alpha1.MacClass {
	return &macvirtv1alpha1.MacClass{
		ObjectMeta: metav1.ObjectMeta{Name: "sonoma"},
		Spec: macvirtv1alpha1.MacClassSpec{
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{
				SourceRef: &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: strPtr("macvirt-images"), Name: "sonoma"}}},
			Bootloader: macvirtv1alpha1.BootloaderSpec{DiskSource: macvirtv1alpha1.DiskSource{
				Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/opencore.qcow2"}}}},
		},
	}
}

func minimalPool() *macvirtv1alpha1.MacPool {
	return &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma"}}
}

func minimalClaim() *macvirtv1alpha1.MacClaim {
	return &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team-a"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
}

func minimalMachine() *macvirtv1alpha1.MacMachine {
	return &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m-1", Namespace: "team-a"},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"}}
}

// expectError fails unless errs holds exactly one error at path whose text
// contains want.
func expectError(t *testing.T, errs field.ErrorList, path, want string) {
	t.Helper()
	if len(errs) != 1 {
		t.Fatalf("want one error at %s, got %d: %v", path, len(errs), errs)
	}
	if errs[0].Field != path {
		t.Errorf("error at %s, want %s: %v", errs[0].Field, path, errs[0])
	}
	if !strings.Contains(errs[0].Error(), want) {
		t.Errorf("error %q does not say %q", errs[0].Error(), want)
	}
}

// expectWarning fails unless some warning contains want.
func expectWarning(t *testing.T, warns []string, want string) {
	t.Helper()
	for _, w := range warns {
		if strings.Contains(w, want) {
			return
		}
	}
	t.Errorf("no warning says %q: %q", want, warns)
}
