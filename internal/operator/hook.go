package operator

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/render"
)

// domainHook is the installed domain hook as the machine controller uses
// it: what VMs are rendered with, and whether the transport's objects are
// in place (nil when they need none, or no machine controller runs).
type domainHook struct {
	render render.Options
	ready  func() error
}

// setUpDomainHook chooses the hook image for the cluster's KubeVirt
// (reading its version, which a fresh install reports after a while) and
// the transport the cluster supports, and adds the runnable that keeps the
// transport's objects when the machine controller runs.
func setUpDomainHook(ctx context.Context, mgr ctrl.Manager, opts *Options) (domainHook, error) {
	log := mgr.GetLogger()
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return domainHook{}, fmt.Errorf("a client to choose the domain-hook transport: %w", err)
	}
	var kubevirtVersion string
	if opts.HookImage == "" {
		versionCtx, cancel := context.WithTimeout(ctx, startupTimeout/2)
		kubevirtVersion, err = install.WaitForKubeVirtVersion(versionCtx, c, time.Second)
		cancel()
		if err != nil {
			log.Info("The cluster's KubeVirt version is unknown", "reason", err.Error())
		}
	}
	choice := install.ChooseImage(opts.HookImage, opts.LookupEnv, kubevirtVersion)
	log.Info("Domain-hook image", "image", choice.Image, "why", choice.Why, "mayNotSuitKubeVirt", choice.Warning)
	hookOpts := install.Options{HookImage: choice.Image, EmulatorPath: opts.EmulatorPath}
	resolveCtx, cancel := context.WithTimeout(ctx, startupTimeout)
	transport, err := install.Resolve(resolveCtx, mgr.GetRESTMapper(), c, opts.DomainHook, hookOpts)
	cancel()
	if err != nil {
		return domainHook{}, err
	}
	log.Info("Domain-hook transport", "asked", opts.DomainHook, "transport", transport)
	hook := domainHook{render: render.Options{DomainHook: transport, HookImage: choice.Image, EmulatorPath: opts.EmulatorPath}}
	if !opts.runs(MachineController) {
		return hook, nil
	}
	objects := &install.Objects{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Transport: transport,
		Options: hookOpts, Log: log.WithName("domain-hook")}
	if err := mgr.Add(objects); err != nil {
		return domainHook{}, err
	}
	hook.ready = objects.Ready
	return hook, nil
}
