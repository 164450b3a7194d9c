// Package render turns a MacClass and a MacMachine into the KubeVirt
// VirtualMachine and CDI DataVolumes that run macOS. It is pure: inputs in,
// objects out; no client, context, logger, clock or randomness, so the same
// inputs always give the same objects and a restarted operator renders
// exactly what it rendered before.
package render
