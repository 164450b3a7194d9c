package v1alpha1

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/smbios"
)

func TestDefaultMacClassSetsEveryDocumentedDefault(t *testing.T) {
	c := minimalClass()
	DefaultMacClass(c)
	s := c.Spec
	q := resource.MustParse
	for name, ok := range map[string]bool{
		"resources.cpu 4":                     s.Resources.CPU == 4,
		"resources.memory 8Gi":                s.Resources.Memory.Cmp(q("8Gi")) == 0,
		"image.size 128Gi":                    s.Image.Size.Cmp(q("128Gi")) == 0,
		"bootloader.size 1Gi":                 s.Bootloader.Size.Cmp(q("1Gi")) == 0,
		"hardware.cpuModel Haswell-noTSX":     s.Hardware.CPUModel == macvirtv1alpha1.CPUModelHaswellNoTSX,
		"hardware.nicModel vmxnet3":           s.Hardware.NICModel == macvirtv1alpha1.NICModelVmxnet3,
		"hardware.diskBus sata":               s.Hardware.DiskBus == macvirtv1alpha1.DiskBusSATA,
		"hardware.smc.mode VirtualSMC":        s.Hardware.SMC.Mode == macvirtv1alpha1.SMCModeVirtualSMC,
		"hardware.smbios.productName":         s.Hardware.SMBIOS.ProductName == "iMacPro1,1",
		"hardware.display.model vga":          s.Hardware.Display.Model == macvirtv1alpha1.DisplayModelVGA,
		"placement.nodeSelector apple":        len(s.Placement.NodeSelector) == 1 && s.Placement.NodeSelector["macvirt.io/apple-hardware"] == "true",
		"placement.tolerations apple":         len(s.Placement.Tolerations) == 1 && s.Placement.Tolerations[0].Key == "macvirt.io/apple-hardware" && s.Placement.Tolerations[0].Operator == "Exists" && s.Placement.Tolerations[0].Effect == "NoSchedule",
		"lifecycle.shutdownGracePeriod 5m":    s.Lifecycle.ShutdownGracePeriod.Duration == 5*time.Minute,
		"lifecycle.bootTimeout 20m":           s.Lifecycle.BootTimeout.Duration == 20*time.Minute,
		"lifecycle.heartbeatTimeout 2m":       s.Lifecycle.HeartbeatTimeout.Duration == 2*time.Minute,
		"lifecycle.drainGracePeriod 1h":       s.Lifecycle.DrainGracePeriod.Duration == time.Hour,
		"tenancy.allowedNamespaces all":       s.Tenancy.AllowedNamespaces != nil && len(s.Tenancy.AllowedNamespaces.MatchLabels) == 0,
		"tenancy.onDemand true":               s.Tenancy.OnDemand != nil && *s.Tenancy.OnDemand,
		"tenancy.allowRetain true":            s.Tenancy.AllowRetain != nil && *s.Tenancy.AllowRetain,
		"image source left as written":        s.Image.SourceRef != nil && s.Image.Source == nil,
		"bootloader source left as written":   s.Bootloader.Source != nil && s.Bootloader.SourceRef == nil,
		"description left empty (no default)": s.Description == "",
	} {
		if !ok {
			t.Errorf("default %s not applied: %+v", name, s)
		}
	}
}

func TestDefaultMacClassKeepsWhatIsSet(t *testing.T) {
	c := minimalClass()
	mem := resource.MustParse("16Gi")
	f := false
	c.Spec.Resources = macvirtv1alpha1.ClassResources{CPU: 8, Memory: &mem}
	c.Spec.Hardware.CPUModel = macvirtv1alpha1.CPUModelPenryn
	c.Spec.Placement.NodeSelector = map[string]string{"example.com/mac": "yes"}
	c.Spec.Lifecycle.BootTimeout = &metav1.Duration{Duration: time.Hour}
	c.Spec.Tenancy.OnDemand = &f
	want := c.DeepCopy()
	DefaultMacClass(c)
	if c.Spec.Resources.CPU != 8 || c.Spec.Resources.Memory.Cmp(mem) != 0 || c.Spec.Hardware.CPUModel != want.Spec.Hardware.CPUModel ||
		c.Spec.Placement.NodeSelector["example.com/mac"] != "yes" || len(c.Spec.Placement.NodeSelector) != 1 ||
		c.Spec.Lifecycle.BootTimeout.Duration != time.Hour || *c.Spec.Tenancy.OnDemand {
		t.Errorf("defaulting changed set fields: %+v", c.Spec)
	}
}

func TestDefaultMacPool(t *testing.T) {
	tests := map[string]struct {
		in                    *macvirtv1alpha1.MacPool
		idle, max, maxProvisg int32
		ns                    string
	}{
		"empty": {in: minimalPool(), idle: 1, max: 2, maxProvisg: 2, ns: "macvirt-pools"},
		"the cap follows idle": {in: func() *macvirtv1alpha1.MacPool {
			p := minimalPool()
			p.Spec.Idle = i32(5)
			return p
		}(), idle: 5, max: 10, maxProvisg: 2, ns: "macvirt-pools"},
		"set values kept": {in: func() *macvirtv1alpha1.MacPool {
			p := minimalPool()
			p.Spec.Idle, p.Spec.MaxMachines, p.Spec.MaxProvisioning, p.Spec.Namespace = i32(0), i32(9), 4, "ci-macs"
			return p
		}(), idle: 0, max: 9, maxProvisg: 4, ns: "ci-macs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			DefaultMacPool(tc.in)
			s := tc.in.Spec
			if *s.Idle != tc.idle || s.EffectiveMaxMachines() != tc.max || s.MaxProvisioning != tc.maxProvisg || s.Namespace != tc.ns {
				t.Errorf("got idle %d max %d maxProvisioning %d namespace %s", *s.Idle, s.EffectiveMaxMachines(), s.MaxProvisioning, s.Namespace)
			}
			if tc.in.Spec.MaxMachines != nil && name != "set values kept" {
				t.Errorf("maxMachines defaulted into spec (%d): it would freeze the cap", *tc.in.Spec.MaxMachines)
			}
		})
	}
}

func TestDefaultMacClaim(t *testing.T) {
	c := minimalClaim()
	DefaultMacClaim(c)
	if c.Spec.ReclaimPolicy != macvirtv1alpha1.ReclaimDelete {
		t.Errorf("reclaimPolicy %q, want Delete", c.Spec.ReclaimPolicy)
	}
	c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain
	DefaultMacClaim(c)
	if c.Spec.ReclaimPolicy != macvirtv1alpha1.ReclaimRetain {
		t.Errorf("a set reclaimPolicy was changed to %q", c.Spec.ReclaimPolicy)
	}
}

func TestDefaultMacMachineGeneratesTheIdentityOnce(t *testing.T) {
	m := minimalMachine()
	var asked []string
	gen := func(product string) (macvirtv1alpha1.MachineSMBIOS, error) {
		asked = append(asked, product)
		return smbios.New(product, nil)
	}
	if err := DefaultMacMachine(m, "MacPro7,1", gen); err != nil {
		t.Fatal(err)
	}
	if m.Spec.SMBIOS == nil || m.Spec.Running == nil || !*m.Spec.Running {
		t.Fatalf("identity or running not defaulted: %+v", m.Spec)
	}
	if len(asked) != 1 || asked[0] != "MacPro7,1" {
		t.Errorf("identity drawn for %q, want once for the class's product MacPro7,1", asked)
	}
	if errs, _ := ValidateMacMachine(m, MachineEnv{Class: minimalClass()}); len(errs) != 0 {
		t.Errorf("generated identity is invalid: %v", errs)
	}
	first := *m.Spec.SMBIOS
	if err := DefaultMacMachine(m, "MacPro7,1", gen); err != nil {
		t.Fatal(err)
	}
	if *m.Spec.SMBIOS != first || len(asked) != 1 {
		t.Errorf("a second defaulting changed the identity or drew again")
	}
}

func TestDefaultMacMachineUsesTheDefaultProductWithoutAClass(t *testing.T) {
	var got string
	err := DefaultMacMachine(minimalMachine(), "", func(p string) (macvirtv1alpha1.MachineSMBIOS, error) {
		got = p
		return smbios.New(p, nil)
	})
	if err != nil || got != "iMacPro1,1" {
		t.Errorf("product %q, err %v; want iMacPro1,1", got, err)
	}
}

func TestDefaultMacMachineReportsAFailedDraw(t *testing.T) {
	boom := errors.New("no entropy")
	m := minimalMachine()
	err := DefaultMacMachine(m, "", func(string) (macvirtv1alpha1.MachineSMBIOS, error) { return macvirtv1alpha1.MachineSMBIOS{}, boom })
	if !errors.Is(err, boom) || m.Spec.SMBIOS != nil {
		t.Errorf("err %v, smbios %+v; want the draw's error and no identity", err, m.Spec.SMBIOS)
	}
}

func TestDefaultingIsIdempotent(t *testing.T) {
	c := minimalClass()
	DefaultMacClass(c)
	again := c.DeepCopy()
	DefaultMacClass(again)
	p := minimalPool()
	DefaultMacPool(p)
	p2 := p.DeepCopy()
	DefaultMacPool(p2)
	if !equality.Semantic.DeepEqual(c, again) || !equality.Semantic.DeepEqual(p, p2) {
		t.Error("a second defaulting changed the object")
	}
}
