#!/usr/bin/env bash
# Regenerates the domain hook's input fixtures: for every golden rendering in
# internal/render/testdata, the libvirt domain XML KubeVirt's virt-launcher
# would hand the hook (internal/domainhook/testdata/kubevirt/*.domain.xml).
#
# It compiles a large part of kubevirt.io/kubevirt, whose module graph needs
# modules some Go proxies do not serve, so it is not part of make verify-gen;
# the domain hook's tests instead fail when a fixture was made from an older
# rendering. Run it (make domain-fixtures) after changing the renderer.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
out_dir="${repo_root}/internal/domainhook/testdata/kubevirt"

mkdir -p "${out_dir}"
rm -f "${out_dir}"/*.domain.xml
cd "${script_dir}"
go run . -base "${repo_root}" -out "${out_dir}" "${repo_root}"/internal/render/testdata/*.yaml
