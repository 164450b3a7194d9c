// Package vz drives macOS VMs on an Apple-silicon host through the tools
// that wrap Apple's Virtualization framework: lume's local HTTP API and the
// tart command. The macvirt host agent uses only the Driver interface; the
// tools' own words and exit codes are mapped to this package's errors here.
package vz
