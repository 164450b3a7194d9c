// Package helmcheck renders macvirt's Helm chart (dist/chart, which `make
// helm-chart` generates from config/default with Kubebuilder's helm
// plugin) with Helm's own template engine and checks it against what
// kustomize builds from config/default. It is a module of its own so that
// Helm's dependencies stay out of the operator's.
package helmcheck
