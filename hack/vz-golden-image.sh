#!/usr/bin/env bash
# Makes a golden image for Apple-silicon Macs (a Virtualization class), on a
# Mac with tart, from a public macOS image: the macvirt guest agent as a
# LaunchDaemon (darwin/arm64) and GitHub's arm64 actions runner go in, the
# VM shuts down from inside, and tart pushes it to your registry. It prints
# the MacClass that uses it.
#
#   hack/vz-golden-image.sh --to registry.example.com/macs/sequoia-macvirt:1 \
#     [--from ghcr.io/cirruslabs/macos-sequoia-base:latest] \
#     [--agent bin/macvirt-agent-arm64] [--runner-version 2.328.0] \
#     [--user admin] [--password admin]
#
# Needs tart, ssh and sshpass on the Mac, `tart login` to the registry
# first, and the agent built for arm64 (make build-agent). --user and
# --password are the image's administrator (the cirruslabs images' is
# admin/admin).
set -euo pipefail

from="ghcr.io/cirruslabs/macos-sequoia-base:latest"
to=""
agent="bin/macvirt-agent-arm64"
plist="cmd/macvirt-agent/io.macvirt.agent.plist"
runner="2.328.0"
user="admin"
password="admin"
vm="macvirt-golden-build-$$"
while [ $# -gt 0 ]; do
	case "$1" in
	--from) from="$2"; shift 2 ;;
	--to) to="$2"; shift 2 ;;
	--agent) agent="$2"; shift 2 ;;
	--runner-version) runner="$2"; shift 2 ;;
	--user) user="$2"; shift 2 ;;
	--password) password="$2"; shift 2 ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$to" ] || { echo "--to is required: the OCI reference to push the image to" >&2; exit 2; }
for c in tart ssh sshpass; do
	command -v "$c" >/dev/null || { echo "$c is not on PATH (brew install cirruslabs/cli/tart hudochenkov/sshpass/sshpass)" >&2; exit 2; }
done
[ "$(uname -s)/$(uname -m)" = "Darwin/arm64" ] || { echo "run this on an Apple-silicon Mac" >&2; exit 2; }
file "$agent" | grep -q "arm64" || { echo "$agent is not a darwin/arm64 binary: make build-agent" >&2; exit 2; }

start=$(date +%s)
say() { printf '[%5ss] %s\n' "$(($(date +%s) - start))" "$*"; }
share=$(mktemp -d)
runpid=""
cleanup() {
	set +e
	[ -n "$runpid" ] && kill -INT "$runpid" 2>/dev/null && wait "$runpid" 2>/dev/null
	tart delete "$vm" >/dev/null 2>&1
	rm -rf "$share"
}
trap cleanup EXIT

mkdir -p "$share/macvirt"
cp "$agent" "$share/macvirt/macvirt-agent"
cp "$plist" "$share/macvirt/io.macvirt.agent.plist"

say "cloning $from (pulling it if this Mac has not)"
tart clone "$from" "$vm"
say "starting it with the agent shared in"
tart run "$vm" --no-graphics --dir="macvirt:$share/macvirt:ro" >/dev/null 2>&1 &
runpid=$!
ip=$(tart ip "$vm" --wait 300)
say "it runs at $ip; waiting for SSH"
sshopts=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5)
for _ in $(seq 60); do
	sshpass -p "$password" ssh "${sshopts[@]}" "$user@$ip" true 2>/dev/null && break
	sleep 5
done
guest() { sshpass -p "$password" ssh "${sshopts[@]}" "$user@$ip" "$@"; }

say "installing the guest agent as a LaunchDaemon, and the arm64 actions runner $runner"
guest "PW='$password' RUNNER='$runner' /bin/sh -s" <<'EOF'
set -eu
sudo() { printf '%s\n' "$PW" | /usr/bin/sudo -S -p '' "$@"; }
src="/Volumes/My Shared Files/macvirt"
if [ ! -f "$src/macvirt-agent" ]; then
	# No GUI session, so no automount: mount the share as the agent does.
	sudo mkdir -p /private/var/run/macvirt-shares
	sudo mount_virtiofs com.apple.virtio-fs.automount /private/var/run/macvirt-shares
	src=/private/var/run/macvirt-shares/macvirt
fi
sudo install -d -m 0755 /usr/local/libexec
sudo install -m 0755 "$src/macvirt-agent" /usr/local/libexec/macvirt-agent
sudo install -m 0644 -o root -g wheel "$src/io.macvirt.agent.plist" /Library/LaunchDaemons/io.macvirt.agent.plist
/usr/local/libexec/macvirt-agent -version
mkdir -p "$HOME/actions-runner"
cd "$HOME/actions-runner"
curl -fsSL -o runner.tar.gz "https://github.com/actions/runner/releases/download/v$RUNNER/actions-runner-osx-arm64-$RUNNER.tar.gz"
tar xzf runner.tar.gz
rm runner.tar.gz
./config.sh --version
EOF

say "shutting macOS down from inside (never tart stop: APFS)"
guest "printf '%s\n' '$password' | sudo -S -p '' shutdown -h now" || true
wait "$runpid" || true
runpid=""
say "pushing $to"
tart push "$vm" "$to"
say "done: a class for it"
cat <<EOF
apiVersion: macvirt.io/v1alpha1
kind: MacClass
metadata:
  name: $(basename "${to%:*}")
spec:
  runtime: Virtualization
  image:
    source:
      registry:
        url: docker://$to
EOF
