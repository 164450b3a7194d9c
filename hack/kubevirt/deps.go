//go:build tools

// Package main records the KubeVirt commands macvirt's test clusters run
// (the Makefile builds them from this module with `go build
// kubevirt.io/kubevirt/cmd/...`), so that go.mod and go.sum pin what they
// import.
package main

import (
	_ "kubevirt.io/kubevirt/cmd/virt-api"
	_ "kubevirt.io/kubevirt/cmd/virt-controller"
)
