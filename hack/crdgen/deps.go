// Package main imports the packages below only so that this module requires
// their modules at the versions pinned in go.mod and go.sum:
//
//   - kubevirt.io/kubevirt: the generator reads KubeVirt's CRD validation
//     schemas from that module's source (see kubevirt.go). The package that
//     holds them cannot be compiled outside KubeVirt's own build, so a small
//     package of the module is imported instead.
//   - kubevirt.io/containerized-data-importer-api: generate.sh runs
//     controller-gen from this directory, and controller-gen loads the CDI
//     API package through this module's go.mod.
package main

import (
	_ "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	_ "kubevirt.io/kubevirt/pkg/pointer"
)
