#!/usr/bin/env bash
# Prepares a machine for the domain hook's libvirt tests, as root, after
# libvirt-daemon and QEMU are installed (.ci/run and the Tests workflow run it).
#
# libvirtd, which those tests start when none runs, runs QEMU as libvirt-qemu;
# that user must exist and be able to open /dev/kvm, as udev arranges on a
# normal host (group kvm, mode 0660). Without udev the device stays root's
# alone; libvirt then finds its cached QEMU capabilities invalid on every
# look-up ("KVM was enabled when probing ..., but it is not available now")
# and re-probes QEMU each time: about 120 s per domain conversion instead of
# 0.1 s (measured on two cores).
set -euo pipefail

getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
id libvirt-qemu >/dev/null 2>&1 || useradd -r -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu

if [ -e /dev/kvm ]; then
	getent group kvm >/dev/null || groupadd -r kvm
	id -nG libvirt-qemu | grep -qw kvm || usermod -aG kvm libvirt-qemu
	chgrp kvm /dev/kvm
	chmod g+rw /dev/kvm
	ls -l /dev/kvm
else
	echo "no /dev/kvm: QEMU emulates with TCG"
fi
