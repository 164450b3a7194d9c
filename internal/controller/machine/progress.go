package machine

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// progressStep is the granularity, in percent, of a provisioning machine's
// status.provisioning.progress. CDI reads an import's progress every 2 s
// and writes each new value to the DataVolume; copied as is, every such
// tick of every disk would be a status write of every provisioning machine
// (and a watch event for every client of it). In steps of 10 % a machine's
// status changes about ten times per import.
const progressStep = 10

// diskProgress is what one unfinished DataVolume says about its transfer.
type diskProgress struct {
	phase    cdiv1.DataVolumePhase
	progress cdiv1.DataVolumeProgress
}

// reportedProgress decides status.provisioning.progress from the unfinished
// disks and the value the status shows now (previous, "" when none):
//   - the slowest disk's progress, rounded down to a multiple of
//     progressStep ("40%");
//   - a disk that has not started its transfer yet counts as 0 %;
//   - a disk in transfer whose progress CDI cannot read ("N/A", which CDI
//     falls back to mid-import) leaves the last known value in place rather
//     than sending the machine back to 0 %; with none known yet, it counts
//     as 0 %;
//   - a disk cloned by CSI clone or snapshot reports "N/A" until it is done
//     (CDI's clone populator has no progress for them): it sets no figure,
//     and with only such disks there is none ("").
func reportedProgress(disks []diskProgress, previous string) string {
	slowest, unknown := math.Inf(1), false
	for _, d := range disks {
		pct, ok := parsePercent(string(d.progress))
		switch {
		case progressNeverReported(d.phase):
			continue
		case ok:
		case d.phase == cdiv1.ImportInProgress || d.phase == cdiv1.CloneInProgress:
			unknown, pct = true, 0
		default:
			pct = 0
		}
		slowest = math.Min(slowest, pct)
	}
	if _, ok := parsePercent(previous); unknown && ok {
		return previous
	}
	if math.IsInf(slowest, 1) {
		return ""
	}
	step := math.Floor(math.Max(0, math.Min(slowest, 100))/progressStep) * progressStep
	return fmt.Sprintf("%d%%", int(step))
}

// progressNeverReported reports the DataVolume phases of a CSI or snapshot
// clone (pkg/controller/datavolume/clone-controller-base.go in CDI,
// populatorPhaseMap), whose progress stays "N/A" until Succeeded.
func progressNeverReported(phase cdiv1.DataVolumePhase) bool {
	switch phase {
	case cdiv1.CSICloneInProgress, cdiv1.SnapshotForSmartCloneInProgress, cdiv1.CloneFromSnapshotSourceInProgress,
		cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress:
		return true
	}
	return false
}

// parsePercent reads CDI's progress strings such as "45.20%".
func parsePercent(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	return v, err == nil && strings.HasSuffix(s, "%")
}
