package machine

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestReportedProgress(t *testing.T) {
	in := func(p string) diskProgress { return diskProgress{cdiv1.ImportInProgress, cdiv1.DataVolumeProgress(p)} }
	clone := func(p string) diskProgress { return diskProgress{cdiv1.CloneInProgress, cdiv1.DataVolumeProgress(p)} }
	cases := map[string]struct {
		disks    []diskProgress
		previous string
		want     string
	}{
		"no unfinished disk":                     {nil, "", ""},
		"pending, progress N/A, counts as 0":     {[]diskProgress{{cdiv1.Pending, "N/A"}}, "", "0%"},
		"scheduled counts as 0 even if known":    {[]diskProgress{{cdiv1.ImportScheduled, "N/A"}}, "30%", "0%"},
		"not yet reported counts as 0":           {[]diskProgress{{"", ""}}, "", "0%"},
		"rounded down to 10 %":                   {[]diskProgress{in("45.20%")}, "", "40%"},
		"a tick within the step changes nothing": {[]diskProgress{in("49.99%")}, "40%", "40%"},
		"the next step":                          {[]diskProgress{in("50.00%")}, "40%", "50%"},
		"the slowest disk":                       {[]diskProgress{in("80.00%"), clone("45.20%")}, "", "40%"},
		"a disk still scheduled is the slowest":  {[]diskProgress{in("80.00%"), {cdiv1.CloneScheduled, "N/A"}}, "", "0%"},
		"N/A mid-import keeps the last value":    {[]diskProgress{in("N/A")}, "60%", "60%"},
		"N/A of one disk keeps the last value":   {[]diskProgress{in("N/A"), in("90.00%")}, "60%", "60%"},
		"N/A with nothing known yet is 0":        {[]diskProgress{clone("N/A")}, "", "0%"},
		"N/A does not keep an unreadable value":  {[]diskProgress{in("N/A")}, "N/A", "0%"},
		"known again after N/A":                  {[]diskProgress{in("72.00%")}, "60%", "70%"},
		"a restarted import goes back":           {[]diskProgress{in("3.00%")}, "60%", "0%"},
		"CDI's pre-rounded 100.0%":               {[]diskProgress{in("100.0%")}, "90%", "100%"},
		"over 100 is 100":                        {[]diskProgress{in("100.7%")}, "", "100%"},
		"no percent sign is unreadable":          {[]diskProgress{in("45")}, "40%", "40%"},
		"a CSI clone sets no figure":             {[]diskProgress{{cdiv1.CSICloneInProgress, "N/A"}}, "", ""},
		"a snapshot clone sets no figure":        {[]diskProgress{{cdiv1.SnapshotForSmartCloneInProgress, "N/A"}}, "", ""},
		"an import beside a CSI clone sets it":   {[]diskProgress{{cdiv1.CSICloneInProgress, "N/A"}, in("45.20%")}, "", "40%"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := reportedProgress(tc.disks, tc.previous); got != tc.want {
				t.Errorf("reportedProgress(%v, %q) = %q, want %q", tc.disks, tc.previous, got, tc.want)
			}
		})
	}
}

// TestMachineStatusChangesInProgressSteps feeds computeMachineStatus an
// import of two disks ticking every 0.5 % (CDI's 2 s reads), with an N/A
// spell, and counts the status changes: about one per 10 % step of the
// slowest disk, none for the N/A spell.
func TestMachineStatusChangesInProgressSteps(t *testing.T) {
	m := machine()
	writes := 0
	observe := func(dvs ...*cdiv1.DataVolume) {
		st := computeMachineStatus(machineObservation{Now: t0, Machine: m, Class: class(), DataVolumes: dvs}).Status
		if !equality.Semantic.DeepEqual(m.Status, st) {
			writes++
			m.Status = st
		}
	}
	observe(dv("m-opencore", cdiv1.Pending, "N/A"), dv("m-system", cdiv1.Pending, "N/A"))
	for i := 0; i <= 200; i++ {
		sys := fmt.Sprintf("%.2f%%", float64(i)/2)
		boot := fmt.Sprintf("%.2f%%", min(100, float64(i)))
		if i >= 60 && i < 80 {
			sys = "N/A"
		}
		observe(dv("m-opencore", cdiv1.ImportInProgress, boot), dv("m-system", cdiv1.ImportInProgress, sys))
		if m.Status.Provisioning == nil {
			t.Fatalf("tick %d: no progress while importing", i)
		}
	}
	if writes > 14 {
		t.Errorf("%d status changes over an import of 402 progress ticks, want about one per %d %% step", writes, progressStep)
	}
	if got := m.Status.Provisioning.Progress; got != "100%" {
		t.Errorf("progress at the end = %q", got)
	}
	if m.Status.Phase != macvirtv1alpha1.MachineProvisioning {
		t.Errorf("phase = %s", m.Status.Phase)
	}
}

func TestADiskClonedWithoutProgressSaysSo(t *testing.T) {
	dv := func(name string, phase cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		d := &cdiv1.DataVolume{}
		d.Name, d.Status.Phase, d.Status.Progress = name, phase, "N/A"
		return d
	}
	o := machineObservation{Machine: &macvirtv1alpha1.MacMachine{},
		DataVolumes: []*cdiv1.DataVolume{dv("m-opencore", cdiv1.RebindInProgress), dv("m-system", cdiv1.CSICloneInProgress)}}
	got := observeDisks(o)
	if got.progress != "" || !strings.Contains(got.cond.Message, "CDI reports no progress for this clone method") {
		t.Errorf("observeDisks = %+v, want no figure and a message saying the clone method reports none", got)
	}
}
