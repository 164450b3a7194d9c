package simulator

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestMacOSVolumeIsSecondInBootOrder(t *testing.T) {
	disk := func(name string, order uint) kubevirtv1.Disk {
		d := kubevirtv1.Disk{Name: name}
		if order > 0 {
			d.BootOrder = &order
		}
		return d
	}
	dv := func(name string) kubevirtv1.Volume {
		return kubevirtv1.Volume{Name: name, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "dv-" + name}}}
	}
	secret := kubevirtv1.Volume{Name: "config", VolumeSource: kubevirtv1.VolumeSource{Secret: &kubevirtv1.SecretVolumeSource{SecretName: "s"}}}
	for name, tc := range map[string]struct {
		disks   []kubevirtv1.Disk
		volumes []kubevirtv1.Volume
		want    string
	}{
		"bootloader then macOS":        {[]kubevirtv1.Disk{disk("oc", 1), disk("mac", 2), disk("config", 0)}, []kubevirtv1.Volume{dv("oc"), dv("mac"), secret}, "mac"},
		"listed out of order":          {[]kubevirtv1.Disk{disk("mac", 2), disk("oc", 1)}, []kubevirtv1.Volume{dv("mac"), dv("oc")}, "mac"},
		"a recovery image comes after": {[]kubevirtv1.Disk{disk("oc", 1), disk("mac", 2), disk("rec", 3)}, []kubevirtv1.Volume{dv("rec"), dv("oc"), dv("mac")}, "mac"},
		"one disk boots":               {[]kubevirtv1.Disk{disk("mac", 1)}, []kubevirtv1.Volume{dv("mac")}, "mac"},
		"no disk has an order":         {[]kubevirtv1.Disk{disk("mac", 0)}, []kubevirtv1.Volume{dv("mac")}, ""},
	} {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		vmi.Spec.Domain.Devices.Disks = tc.disks
		vmi.Spec.Volumes = tc.volumes
		got := ""
		if v := macOSVolume(vmi); v != nil {
			got = v.Name
		}
		if got != tc.want {
			t.Errorf("%s: macOS on %q, want %q", name, got, tc.want)
		}
	}
}
