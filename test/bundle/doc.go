// Package bundle checks what users install: the OLM bundle (the
// operator-framework validators and operator-sdk scorecard's basic and OLM
// checks, reproduced), the kustomize configurations, Pod Security, and that
// images and RBAC are named in one place.
package bundle
