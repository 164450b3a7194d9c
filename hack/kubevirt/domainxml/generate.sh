#!/usr/bin/env bash
# Regenerates the domain hook's input fixtures: for every golden rendering in
# internal/render/testdata, the libvirt domain XML KubeVirt's virt-launcher
# would hand the hook (internal/domainhook/hook/testdata/kubevirt/*.domain.xml).
#
# It compiles a large part of kubevirt.io/kubevirt (about two minutes on two
# cores with a cold build cache, seconds after that); the two modules of that
# graph the Go module proxy refuses are replaced by compile-time stand-ins
# (stubs/README.md). make golden and make verify-gen run it after rewriting
# the render goldens, and the domain hook's tests fail when a fixture was made
# from an older rendering.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../../.." && pwd)"
out_dir="${repo_root}/internal/domainhook/hook/testdata/kubevirt"
# What virt-api's admission and virt-controller's virt-launcher pod make of
# each rendering (the render tests check the macOS slot reaches the pod).
launcher_dir="${repo_root}/internal/render/testdata/launcher"

fixtures() {
	mkdir -p "${out_dir}" "${launcher_dir}"
	rm -f "${out_dir}"/*.domain.xml "${launcher_dir}"/*.launcher.yaml
	cd "${script_dir}"
	go run . -base "${repo_root}" -out "${out_dir}" -launcher "${launcher_dir}" "${repo_root}"/internal/render/testdata/*.yaml
}

# The Plugin transports ("generate.sh plugins"): KubeVirt's CEL pipeline and
# its gRPC client against the hook binary, for every variant the domain
# hook's tests wrote (internal/domainhook/hook/testdata/plugin/variants.yaml;
# make golden writes it after the fixtures, then runs this).
variants="${repo_root}/internal/domainhook/hook/testdata/plugin/variants.yaml"

plugins() {
	plugin_dir="${repo_root}/internal/domainhook/hook/testdata/plugin"
	tmp="$(mktemp -d)"
	trap 'rm -rf "${tmp}"' EXIT
	(cd "${repo_root}" && go build -o "${tmp}/onDefineDomain" ./cmd/domain-hook)
	rm -f "${plugin_dir}"/cel/*.xml "${plugin_dir}"/sidecar/*.xml
	cd "${script_dir}"
	go run . -plugin-variants "${variants}" -renderings "${repo_root}/internal/render/testdata" \
		-hook-binary "${tmp}/onDefineDomain" -out "${plugin_dir}"
}

case "${1:-fixtures}" in
fixtures) fixtures ;;
plugins) plugins ;;
*)
	echo "usage: $0 [fixtures|plugins]" >&2
	exit 2
	;;
esac
