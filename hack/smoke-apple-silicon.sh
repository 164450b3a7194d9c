#!/usr/bin/env bash
# An end-to-end check of one real Apple-silicon Mac with macvirt, for a user
# to run against a real cluster: the Mac's host agent runs (its doctor says
# ok), macvirt's operator runs, and kubectl reaches the cluster as an admin.
#
#   hack/smoke-apple-silicon.sh --host mac-a [--image REF] [--timeout 1800] [--suspended]
#
# It labels the MacHost for a class of its own, keeps a pool of one warm Mac
# on it, claims that Mac with a bootstrap that runs sw_vers, runs sw_vers
# over `kubectl mac ssh` (your ~/.ssh/id_ed25519, or SMOKE_IDENTITY),
# releases the claim, and waits until the Mac's slot is
# free again and the pool is warm once more. Each step prints how long it
# took; docs/apple-silicon-hosts.md shows the expected output. Everything it
# made is deleted at the end, whatever happened. With --suspended the pool
# keeps its Mac suspended (idleState: Suspended): the claim resumes it, and
# the test shows the resume's time and that the Mac's SSH host keys are new.
set -euo pipefail

host=""
image="ghcr.io/cirruslabs/macos-sequoia-base:latest"
timeout=1800
idle_state=Running
ns="macvirt-smoke"
name="macvirt-smoke"
while [ $# -gt 0 ]; do
	case "$1" in
	--host) host="$2"; shift 2 ;;
	--image) image="$2"; shift 2 ;;
	--timeout) timeout="$2"; shift 2 ;;
	--suspended) idle_state=Suspended; shift ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1 (--host, --image, --timeout, --suspended)" >&2; exit 2 ;;
	esac
done
if [ -z "$host" ]; then
	echo "--host is required: the MacHost's name (kubectl get machosts)" >&2
	exit 2
fi
identity="${SMOKE_IDENTITY:-$HOME/.ssh/id_ed25519}"
if [ ! -r "$identity" ] || [ ! -r "$identity.pub" ]; then
	echo "no SSH key at $identity(.pub): make one with ssh-keygen -t ed25519, or set SMOKE_IDENTITY to another" >&2
	exit 2
fi
for c in kubectl kubectl-mac; do
	command -v "$c" >/dev/null || { echo "$c is not on PATH (docs/install.md)" >&2; exit 2; }
done

start=$(date +%s)
failed=0
say() { printf '[%5ss] %s\n' "$(($(date +%s) - start))" "$*"; }
# step NAME CMD...: runs CMD, prints how long it took, and stops the test
# when it fails.
step() {
	local what="$1" t0 out
	shift
	t0=$(date +%s)
	if out=$("$@" 2>&1); then
		say "ok      $what ($(($(date +%s) - t0))s)${out:+: $out}"
	else
		say "FAILED  $what ($(($(date +%s) - t0))s): $out"
		failed=1
		exit 1
	fi
}
# until_true SECONDS CMD...: polls CMD every 5s until it succeeds.
until_true() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge "$deadline" ]; then
			"$@" 2>&1 || true
			return 1
		fi
		sleep 5
	done
}
cleanup() {
	set +e
	kubectl delete macclaim -n "$ns" smoke --ignore-not-found --wait=true --timeout=600s >/dev/null 2>&1
	kubectl delete macpool "$name" --ignore-not-found --wait=true --timeout=900s >/dev/null 2>&1
	kubectl delete macclass "$name" --ignore-not-found >/dev/null 2>&1
	kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1
	kubectl label machost "$host" macvirt.io/smoke- >/dev/null 2>&1
	if [ "$failed" = 0 ]; then
		say "done: every step passed"
	else
		say "done: a step FAILED (above); kubectl describe machost $host, and the host agent's log on the Mac, say more"
	fi
}
trap cleanup EXIT

running() { kubectl get machost "$host" -o jsonpath='{.status.agent.runningVMs}'; }
idle() { [ "$(kubectl get macpool "$name" -o jsonpath='{.status.idle}')" = "1" ]; }
claim_ready() { [ "$(kubectl get macclaim -n "$ns" smoke -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = "True" ]; }
gone() { ! kubectl get macmachine -n "$1" "$2" >/dev/null 2>&1; }
suspended() { [ "$(kubectl get macpool "$name" -o jsonpath='{.status.suspended}')" = "1" ] && running_is "$before"; }
# ready_in SECONDS: polls the claim every second until it is Ready, and
# prints how long that took.
ready_in() {
	local t0 deadline
	t0=$(date +%s)
	deadline=$((t0 + $1))
	until claim_ready; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 1
	done
	echo "Ready $(($(date +%s) - t0))s after the claim"
}
running_is() { [ "$(running)" = "$1" ]; }

say "macvirt smoke test of MacHost $host with $image"
step "the MacHost is Ready" kubectl wait machost "$host" --for=condition=Ready --timeout=120s
step "its agent reports slots" kubectl get machost "$host" \
	-o jsonpath='{.status.agent.tool} {.status.agent.chip}, macOS {.status.agent.macOSVersion}, {.status.agent.runningVMs} of {.status.agent.slots} VMs run'
before=$(running)
step "label it for the smoke class" kubectl label machost "$host" macvirt.io/smoke=true --overwrite
step "a class and a pool of one" kubectl apply -f - <<EOF
apiVersion: macvirt.io/v1alpha1
kind: MacClass
metadata:
  name: $name
spec:
  runtime: Virtualization
  image:
    source:
      registry:
        url: docker://$image
  placement:
    hostSelector:
      matchLabels:
        macvirt.io/smoke: "true"
---
apiVersion: macvirt.io/v1alpha1
kind: MacPool
metadata:
  name: $name
spec:
  className: $name
  idle: 1
  idleState: $idle_state
---
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
EOF
step "the pool's Mac is warm (pulled, booted, its guest agent heartbeats)" until_true "$timeout" idle
if [ "$idle_state" = Suspended ]; then
	step "the pool's Mac is suspended: it holds no slot" until_true 600 suspended
	keys_before=$(kubectl get macmachine -n macvirt-pools -l macvirt.io/pool="$name" -o jsonpath='{.items[0].status.guest.sshHostKeys}')
fi
step "claim the warm Mac, with a bootstrap that runs sw_vers" sh -c "kubectl apply -f - >/dev/null <<EOF
apiVersion: macvirt.io/v1alpha1
kind: MacClaim
metadata:
  name: smoke
  namespace: $ns
spec:
  poolName: $name
  sshAuthorizedKeys:
  - $(cat "$identity.pub")
  bootstrap:
    script:
      inline: sw_vers
EOF
"
step "the claim is Ready (its bootstrap ran)" ready_in 600
mns=$(kubectl get macclaim -n "$ns" smoke -o jsonpath='{.status.machineRef.namespace}')
mname=$(kubectl get macclaim -n "$ns" smoke -o jsonpath='{.status.machineRef.name}')
if [ "$idle_state" = Suspended ]; then
	step "it was resumed, not booted" kubectl get macmachine -n "$mns" "$mname" \
		-o jsonpath='suspended at {.status.host.suspendedAt}, resumed at {.status.host.resumedAt}, guest heard at {.status.guest.lastHeartbeat}'
	step "its SSH host keys are new since it was suspended" sh -c \
		"[ -n '$keys_before' ] && [ \"\$(kubectl get macmachine -n $mns $mname -o jsonpath='{.status.guest.sshHostKeys}')\" != '$keys_before' ]"
fi
step "its Mac is on the host" kubectl get macmachine -n "$mns" "$mname" -o jsonpath='{.spec.hostName}: VM {.status.host.vmName}, guest {.status.guest.osVersion} ({.status.guest.osBuild})'
step "the bootstrap ran in macOS" kubectl mac logs -n "$ns" smoke
# The claim's key reaches the guest with its agent's next heartbeat: tried
# for a minute.
step "kubectl mac ssh -- sw_vers, through the API server and the host agent's connection out" \
	until_true 60 kubectl mac ssh -n "$ns" smoke -i "$identity" -- true
step "sw_vers over ssh" kubectl mac ssh -n "$ns" smoke -i "$identity" -- sw_vers
step "release the claim: macOS shuts down from inside, the VM is deleted" sh -c \
	"kubectl delete macclaim -n $ns smoke --wait=true --timeout=900s >/dev/null"
step "its machine is gone" until_true 900 gone "$mns" "$mname"
if [ "$idle_state" = Suspended ]; then
	step "the pool's new Mac is suspended again, and the slot is free" until_true "$timeout" suspended
else
	step "the slot is free again (only the pool's new warm Mac runs, as before)" until_true 900 running_is "$((before + 1))"
fi
step "the pool is warm again" until_true "$timeout" idle
