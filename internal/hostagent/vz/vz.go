/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package vz

import (
	"context"
	"errors"
)

// State is a VM's state as a driver reports it.
type State string

// VM states.
const (
	// StateStopped: the VM exists and does not run.
	StateStopped State = "Stopped"
	// StateStarting: a start was accepted and the VM does not run yet
	// (lume's "provisioning", a tart run whose VM holds no lock yet).
	StateStarting State = "Starting"
	// StateRunning: the Virtualization framework runs the VM.
	StateRunning State = "Running"
	// StateSuspended: the VM does not run and its memory is saved beside
	// its disk (tart's state.vzvmsave); its next start restores it. It
	// holds no licence slot.
	StateSuspended State = "Suspended"
)

// VM is one VM on the host.
type VM struct {
	// Name is the VM's name on the host.
	Name string
	// State is what the driver last saw.
	State State
	// IP is the guest's address on the host's NAT network, when the VM
	// runs and the driver knows it.
	IP string
	// MAC is the VM's network MAC address, as its configuration says; ""
	// when the tool does not say.
	MAC string
}

// Slots is what the host says about its VM licence slots.
type Slots struct {
	// Max is how many macOS VMs may run at once (the Virtualization
	// framework's limit, 2 under Apple's licence).
	Max int
	// Running is how many VMs the driver sees running.
	Running int
}

// CreateOptions sizes a VM made from an image.
type CreateOptions struct {
	// Image is the OCI reference of the macOS image
	// (ghcr.io/cirruslabs/macos-sequoia-base:latest).
	Image string
	// CPUs is the virtual CPU count; 0 keeps the image's.
	CPUs int
	// MemoryMiB is the memory; 0 keeps the image's.
	MemoryMiB int
	// Progress, when set, is told how a pull of the image goes, as often
	// as the tool says; a tool that does not say never calls it.
	Progress func(PullProgress)
	// PullAlways asks the registry for the image's digest first and pulls
	// what changed, rather than using the image cached under its tag.
	PullAlways bool
}

// PullProgress is how far a pull of an image is, in the tool's words.
type PullProgress struct {
	// TotalBytes is the image's compressed disk size; 0 while unknown.
	TotalBytes int64
	// CompletedBytes is how much of it has arrived.
	CompletedBytes int64
	// Percent is how much of the pull is done, 0 to 100 (lume says only
	// this).
	Percent int
}

// StartOptions says how a VM starts.
type StartOptions struct {
	// ConfigDir is a host directory shared read-only into the guest, with
	// the guest agent's configuration; empty shares nothing. Both tools
	// share it on the Virtualization framework's automount tag under its
	// last element, so macOS shows it at /Volumes/My Shared Files/<last
	// element of ConfigDir>.
	ConfigDir string
	// Suspendable starts the VM so that it may be suspended later (tart's
	// --suspendable: no audio or entropy device, Mac input devices only).
	// A suspended VM is restored this way whatever it says.
	Suspendable bool
}

// Errors a driver returns, wrapped with the tool's own words.
var (
	// ErrNotFound: no VM of that name.
	ErrNotFound = errors.New("no such VM")
	// ErrExists: a VM of that name exists already.
	ErrExists = errors.New("VM exists already")
	// ErrAlreadyRunning: the VM runs already.
	ErrAlreadyRunning = errors.New("VM is already running")
	// ErrNotRunning: the VM does not run.
	ErrNotRunning = errors.New("VM is not running")
	// ErrRunning: the VM runs, and the call needs it stopped.
	ErrRunning = errors.New("VM is running")
	// ErrVMLimit: the Virtualization framework refused to start another
	// VM (VZErrorDomain code 6, "the number of VMs exceeds the system
	// limit").
	ErrVMLimit = errors.New("the Virtualization framework's limit on running VMs was reached")
	// ErrNoGracefulStop: the tool cannot ask the guest to shut down; the
	// caller must ask macOS some other way and never force instead.
	ErrNoGracefulStop = errors.New("the tool cannot ask the guest to shut down")
)

// Driver runs macOS VMs on one Apple-silicon host through a tool that
// wraps Apple's Virtualization framework (lume, tart). Every call is
// idempotent where the tool allows it, and errors wrap the ones above so
// the host agent decides on them, not on a tool's words.
type Driver interface {
	// Name is the tool's name: "lume" or "tart".
	Name() string
	// List returns every VM on the host.
	List(ctx context.Context) ([]VM, error)
	// Get returns one VM, or ErrNotFound.
	Get(ctx context.Context, name string) (VM, error)
	// Create makes a stopped VM from an image, pulling the image when the
	// host has not cached it; ErrExists when the name is taken. It may take
	// as long as the pull (hours for a large image on a slow link): the
	// caller runs it beside its other work, and cancels ctx to give up, on
	// which the tool removes what it pulled in part.
	Create(ctx context.Context, name string, opts CreateOptions) error
	// Start starts a stopped VM and returns once it runs, or ErrVMLimit
	// when the framework refused it, or ErrAlreadyRunning.
	Start(ctx context.Context, name string, opts StartOptions) error
	// RequestStop asks macOS to shut down (the power button), and returns
	// without waiting; ErrNotRunning when it does not run, and
	// ErrNoGracefulStop when the tool has no way to ask.
	RequestStop(ctx context.Context, name string) error
	// ForceStop turns the VM off without asking macOS (tart stop, lume's
	// stop): only for a deleted machine's VM whose class says PowerOff
	// once its grace period passed. ErrNotRunning when it does not run.
	ForceStop(ctx context.Context, name string) error
	// Suspend pauses a running VM, saves its memory beside its disk and
	// stops it (tart suspend), and returns once it is Suspended: the next
	// Start restores it where it was. ErrNotRunning when it does not run;
	// ErrUnsupported when the tool or the host cannot (lume, macOS before
	// 14). A VM not started Suspendable cannot be saved: the tool ends it
	// as if forced, so callers suspend only VMs they started Suspendable.
	Suspend(ctx context.Context, name string) error
	// CanSuspend is nil when the tool can suspend VMs on this host, and
	// says why not otherwise (wrapping ErrUnsupported).
	CanSuspend(ctx context.Context) error
	// DiscardSavedState drops a suspended VM's saved memory (tart stop of a
	// suspended VM), so its next start boots it cold; nil when the VM is
	// not suspended.
	DiscardSavedState(ctx context.Context, name string) error
	// Delete removes a stopped VM and its disk; ErrRunning when it runs,
	// nil when it does not exist.
	Delete(ctx context.Context, name string) error
	// Slots is the host's VM limit and how many VMs run.
	Slots(ctx context.Context) (Slots, error)
	// Images lists the images the host has cached.
	Images(ctx context.Context) ([]string, error)
	// Pull asks the registry for image's tag and pulls what changed since
	// the host cached it (a re-pushed tag); ErrUnsupported when the tool
	// cannot.
	Pull(ctx context.Context, image string) error
	// ImageDigest is the digest the host has cached image under
	// ("sha256:..."), or ErrUnsupported when the tool does not say.
	ImageDigest(ctx context.Context, image string) (string, error)
	// Version is the tool's version as it prints it; ErrUnsupported when
	// the tool cannot tell (lume's API has no version route).
	Version(ctx context.Context) (string, error)
}
