// A compile-time stand-in for the unserved kubevirt.io/virt-template-api
// v0.2.0; see ../README.md.
module kubevirt.io/virt-template-api

go 1.24.0

require k8s.io/apimachinery v0.34.2
