// Command fleeting-plugin-macvirt is macvirt's instance group for GitLab
// Runner's autoscaler: each instance a MacClaim, one fresh Mac per job.
// gitlab-runner starts it ([runners.autoscaler] plugin); see docs/gitlab.md.
package main

import (
	"gitlab.com/gitlab-org/fleeting/fleeting/plugin"

	"github.com/macvirt/macvirt/internal/gitlab"
)

func main() {
	plugin.Main(&gitlab.InstanceGroup{}, plugin.VersionInfo{Name: "fleeting-plugin-macvirt", Version: gitlab.Version})
}
