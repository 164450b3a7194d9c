#!/usr/bin/env bash
# Regenerates the domain hook's input fixtures: for every golden rendering in
# internal/render/testdata, the libvirt domain XML KubeVirt's virt-launcher
# would hand the hook (internal/domainhook/testdata/kubevirt/*.domain.xml).
#
# It compiles a large part of kubevirt.io/kubevirt (about two minutes on two
# cores with a cold build cache, seconds after that); the two modules of that
# graph the Go module proxy refuses are replaced by compile-time stand-ins
# (stubs/README.md). make golden and make verify-gen run it after rewriting
# the render goldens, and the domain hook's tests fail when a fixture was made
# from an older rendering.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
out_dir="${repo_root}/internal/domainhook/testdata/kubevirt"
# What virt-api's admission and virt-controller's virt-launcher pod make of
# each rendering (the render tests check the macOS slot reaches the pod).
launcher_dir="${repo_root}/internal/render/testdata/launcher"

mkdir -p "${out_dir}" "${launcher_dir}"
rm -f "${out_dir}"/*.domain.xml "${launcher_dir}"/*.launcher.yaml
cd "${script_dir}"
go run . -base "${repo_root}" -out "${out_dir}" -launcher "${launcher_dir}" "${repo_root}"/internal/render/testdata/*.yaml
