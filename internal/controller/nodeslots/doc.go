// Package nodeslots advertises the macOS licence slots of every
// Apple-hardware node as the node resource macvirt.io/macos-slots, and puts
// them back whenever a kubelet loses them. What a node should advertise is
// decided purely (slots.go: computeNodeSlots); controller.go reads the node
// and its instances and writes the node's status.
package nodeslots
