package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// revisionLength is the number of hex digits kept of the revision hash.
const revisionLength = 10

// revisionInput is every part of a class spec that changes a rendered VM or
// DataVolume. Description, tenancy and the boot and heartbeat timeouts
// change nothing rendered, so editing them does not roll machines.
type revisionInput struct {
	Resources           macvirtv1alpha1.ClassResources `json:"resources"`
	Image               macvirtv1alpha1.ImageSpec      `json:"image"`
	Bootloader          macvirtv1alpha1.BootloaderSpec `json:"bootloader"`
	Installer           *macvirtv1alpha1.InstallerSpec `json:"installer,omitempty"`
	Hardware            macvirtv1alpha1.HardwareSpec   `json:"hardware"`
	Placement           macvirtv1alpha1.PlacementSpec  `json:"placement"`
	ShutdownGracePeriod string                         `json:"shutdownGracePeriod"`
}

// ClassRevision is a short, stable hash of everything in the class spec that
// changes a rendered VM. Quantities are hashed in canonical form, so "8Gi"
// and "8192Mi" give the same revision.
func ClassRevision(class *macvirtv1alpha1.MacClass) string {
	spec := class.Spec.DeepCopy()
	in := revisionInput{
		Resources: spec.Resources,
		// A refreshed image hashes as the import it resolves to, so the
		// revision follows the registry's digest.
		Image:      class.EffectiveImage(),
		Installer:  spec.Installer,
		Bootloader: spec.Bootloader,
		// Unset fields hash as their (release's) defaults, so a class
		// defaulted by the API server and one defaulted here agree.
		Hardware:            spec.EffectiveHardware(),
		Placement:           spec.Placement,
		ShutdownGracePeriod: spec.Lifecycle.ShutdownGracePeriodOrDefault().String(),
	}
	// Unset and explicitly defaulted values hash alike, and quantities are
	// hashed in canonical form.
	memory := canonical(spec.Resources.MemoryOrDefault())
	imageSize := canonical(spec.Image.SizeOrDefault())
	bootSize := canonical(spec.Bootloader.SizeOrDefault())
	in.Resources.Memory, in.Image.Size, in.Bootloader.Size = &memory, &imageSize, &bootSize
	// json.Marshal sorts map keys, so the encoding is deterministic.
	b, err := json.Marshal(in)
	if err != nil {
		// Only unsupported types fail to marshal; none are used here.
		panic("render: marshalling class revision input: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:revisionLength]
}
