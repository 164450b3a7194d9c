// Package harness starts a test world in one call: the test cluster
// (envtest's API server and etcd with every CRD, and KubeVirt's own
// virt-api and virt-controller), an administrator's client, and what
// Options ask for at work in it: the simulator alone, or macvirt's System
// (the simulator of KubeVirt's nodes, CDI and macOS guests, and the
// operator with its webhooks, agent endpoint and tunnel), the operator as
// its service account under the shipped RBAC, fake GitHub and Buildkite
// services whose CI agents the guests run, fake Apple-silicon Macs, the
// samples, the class for CI and a tenant. World.Stop (or the end of the
// test, with ForTest) stops all of it.
//
// Every suite under test/ and the sandbox (test/sandbox, `make sandbox`)
// start their world here, so a world is built one way. A test that needs
// only an API server (the webhook suite, the manager binary's test, the
// bench) starts one with the cluster package.
package harness
