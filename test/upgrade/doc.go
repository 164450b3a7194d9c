// Package upgrade checks that upgrading macvirt loses nothing and restarts
// no Mac: the CRDs of the last release (testdata/v<version>/crds.yaml, as
// `make upgrade-baseline` froze them when it was cut) are installed in a
// real API server with a world the operator built on them, then the
// working tree's CRDs replace them and a new operator replaces the old one
// while the simulated KubeVirt and its guests run on.
package upgrade
