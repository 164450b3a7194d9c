package v1alpha1

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/smbios"
)

// The fuzz targets decode arbitrary JSON into each kind, as the webhooks
// do, and check three properties: nothing panics, defaulting twice equals
// defaulting once, and defaulting never makes an object invalid (every
// error after defaulting was already there before). `go test` runs the
// seeds; `make fuzz` explores further.

func seed(f *testing.F, objs ...any) {
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// newErrors returns the errors of after that before did not have.
func newErrors(before, after field.ErrorList) field.ErrorList {
	had := map[string]bool{}
	for _, e := range before {
		had[string(e.Type)+" "+e.Field] = true
	}
	var out field.ErrorList
	for _, e := range after {
		if !had[string(e.Type)+" "+e.Field] {
			out = append(out, e)
		}
	}
	return out
}

func FuzzMacClass(f *testing.F) {
	apple := minimalClass()
	apple.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
		OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}}
	apple.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v"}}
	apple.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}}}
	seed(f, minimalClass(), apple, &macvirtv1alpha1.MacClass{})
	f.Add([]byte(`{"spec":{"image":{"source":{"http":{"url":"ftp://x"},"blank":{}}},"resources":{"cpu":-3,"memory":"-1"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &macvirtv1alpha1.MacClass{}
		if json.Unmarshal(data, c) != nil {
			return
		}
		before, _ := ValidateMacClass(c, ClassEnv{})
		DefaultMacClass(c)
		once := c.DeepCopy()
		DefaultMacClass(c)
		if !equality.Semantic.DeepEqual(once, c) {
			t.Fatalf("defaulting is not idempotent:\n%+v\n%+v", once.Spec, c.Spec)
		}
		after, _ := ValidateMacClass(c, ClassEnv{})
		if added := newErrors(before, after); len(added) > 0 {
			t.Fatalf("defaulting made the class invalid: %v", added)
		}
		_, _ = ValidateMacClassUpdate(once, c, ClassEnv{EmulatorOverride: true})
	})
}

func FuzzMacPool(f *testing.F) {
	sized := minimalPool()
	sized.Spec.Idle, sized.Spec.MaxMachines = i32(3), i32(2)
	seed(f, minimalPool(), sized, &macvirtv1alpha1.MacPool{})
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"idle":-5,"maxProvisioning":-1,"namespace":"BAD NS"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &macvirtv1alpha1.MacPool{}
		if json.Unmarshal(data, p) != nil {
			return
		}
		old := p.DeepCopy()
		before, _ := ValidateMacPool(p, nil)
		DefaultMacPool(p)
		once := p.DeepCopy()
		DefaultMacPool(p)
		if !equality.Semantic.DeepEqual(once, p) {
			t.Fatalf("defaulting is not idempotent:\n%+v\n%+v", once.Spec, p.Spec)
		}
		after, _ := ValidateMacPool(p, minimalClass())
		if added := newErrors(before, after); len(added) > 0 {
			t.Fatalf("defaulting made the pool invalid: %v", added)
		}
		_, _ = ValidateMacPoolUpdate(old, p, nil)
	})
}

func FuzzMacClaim(f *testing.F) {
	keyed := minimalClaim()
	keyed.Spec.SSHAuthorizedKeys = []string{testKey, "ssh-rsa AAAA", ""}
	seed(f, minimalClaim(), keyed, &macvirtv1alpha1.MacClaim{})
	f.Add([]byte(`{"spec":{"poolName":"ci","className":"x","reclaimPolicy":"Keep","sshAuthorizedKeys":["a\nb"]}}`))
	class := minimalClass()
	class.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	env := ClaimEnv{Pool: minimalPool(), Class: class, Namespace: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &macvirtv1alpha1.MacClaim{}
		if json.Unmarshal(data, c) != nil {
			return
		}
		old := c.DeepCopy()
		before, _ := ValidateMacClaim(c, env)
		DefaultMacClaim(c)
		once := c.DeepCopy()
		DefaultMacClaim(c)
		if !equality.Semantic.DeepEqual(once, c) {
			t.Fatalf("defaulting is not idempotent")
		}
		after, _ := ValidateMacClaim(c, env)
		if added := newErrors(before, after); len(added) > 0 {
			t.Fatalf("defaulting made the claim invalid: %v", added)
		}
		_, _ = ValidateMacClaim(c, ClaimEnv{})
		_ = ValidateMacClaimUpdate(old, c)
	})
}

func FuzzMacMachine(f *testing.F) {
	withID := minimalMachine()
	withID.Spec.SMBIOS = &macvirtv1alpha1.MachineSMBIOS{SerialNumber: "C02XK1ZDHX87", BoardSerial: "short", UUID: "x"}
	seed(f, minimalMachine(), withID, &macvirtv1alpha1.MacMachine{})
	gen := func(p string) (macvirtv1alpha1.MachineSMBIOS, error) { return smbios.New(p, nil) }
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &macvirtv1alpha1.MacMachine{}
		if json.Unmarshal(data, m) != nil {
			return
		}
		hadID := m.Spec.SMBIOS != nil
		before, _ := ValidateMacMachine(m, MachineEnv{})
		if err := DefaultMacMachine(m, "", gen); err != nil {
			t.Fatal(err)
		}
		once := m.DeepCopy()
		if err := DefaultMacMachine(m, "", gen); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(once, m) {
			t.Fatalf("defaulting is not idempotent (an identity was drawn twice?)")
		}
		after, _ := ValidateMacMachine(m, MachineEnv{})
		if added := newErrors(before, after); len(added) > 0 {
			t.Fatalf("defaulting made the machine invalid: %v", added)
		}
		if !hadID {
			if errs, _ := ValidateMacMachine(m, MachineEnv{SMBIOSUsers: map[string]string{}}); len(newErrors(before, errs)) > 0 {
				t.Fatalf("the generated identity is invalid: %v", errs)
			}
		}
	})
}
