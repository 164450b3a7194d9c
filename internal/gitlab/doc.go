// Package gitlab is macvirt's fleeting plugin: the instance group that
// GitLab Runner's autoscaler (taskscaler) loads to get one fresh Mac per
// job. Each instance is a MacClaim in one namespace; the plugin holds a key
// pair per instance and puts only the public half in the claim. It needs
// nothing but a kubeconfig that may edit MacClaims in that namespace (the
// shipped macvirt-claim-editor role), and reaches each Mac either directly
// (gitlab-runner runs in the claims' namespace, which the Macs'
// NetworkPolicy admits) or through macvirt's tunnel (gitlab-runner runs
// anywhere its kubeconfig reaches the API server).
//
// The runner's autoscaler owns demand and idle capacity itself; the plugin
// only makes, reports and releases claims, so it sits beside macvirt's
// runner core rather than on it. Warm Macs come from the runner's
// idle_count and a MacPool of the claims' class.
package gitlab
