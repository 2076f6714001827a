#!/bin/bash
# The service as an unprivileged user against that user's rootless Podman:
# makes the user (with subordinate uid and gid ranges) when it is missing,
# gives it the sandbox image from the rootful engine, starts its `podman
# system service` (no systemd here), and runs the core of service.mjs (calls,
# progress, cancellation, tasks, sessions, files, the bridge, two clients)
# as that user.
# Prints TAP. As root:
#
#   tests/e2e/rootless.sh BUILD/corral [IMAGE]
#
# On cgroup v1 rootless Podman cannot apply memory or pids limits (`corral
# doctor` says so); these tests do not depend on them.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-$here/../../build/corral}")
image=${2:-corral-python:latest}
user=corral-ci
[ "$(id -u)" -eq 0 ] || { echo "1..0 # SKIP rootless.sh makes a user: run it as root"; exit 77; }

bail() { echo "Bail out! $*"; exit 1; }
if ! id "$user" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$user" || bail "useradd $user failed"
fi
grep -q "^$user:" /etc/subuid || usermod --add-subuids 200000-265535 "$user" || bail "subuids"
grep -q "^$user:" /etc/subgid || usermod --add-subgids 200000-265535 "$user" || bail "subgids"
home=$(getent passwd "$user" | cut -d: -f6)

# Everything the user reads is under one directory of its own: the binary,
# the tests with their node_modules, its runtime directory.
root=$(mktemp -d /tmp/corral-rootless.XXXXXX)
chmod 0755 "$root"
mkdir -p "$root/bin" "$root/e2e" "$root/run"
cp "$bin" "$root/bin/corral"
cp -a "$here/service.mjs" "$here/package.json" "$here/lib" "$here/node_modules" "$root/e2e/"
chown -R "$user:" "$root/run" "$root/e2e"
chmod 0700 "$root/run"
as_user() {
    runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" \
        XDG_RUNTIME_DIR="$root/run" "$@"
}
podman_pid=""
cleanup() {
    # The service runs under runuser in a subshell: ask for it by its socket.
    pkill -u "$user" -f "podman system service --time=0 unix://$root/" 2>/dev/null
    [ -n "$podman_pid" ] && kill "$podman_pid" 2>/dev/null
    wait 2>/dev/null
    as_user podman rm -af >/dev/null 2>&1
    rm -rf "$root"
}
trap cleanup EXIT

# The image, from the rootful engine's storage into the user's.
podman save --format docker-archive -o "$root/image.tar" "$image" >/dev/null 2>&1 ||
    bail "podman save $image failed"
chmod 0644 "$root/image.tar"
(cd / && as_user podman load -i "$root/image.tar" >/dev/null 2>&1) || bail "podman load as $user failed"
rm -f "$root/image.tar"

sock=$root/run/podman/podman.sock
as_user mkdir -p "$root/run/podman"
(cd / && runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" \
    XDG_RUNTIME_DIR="$root/run" podman system service --time=0 "unix://$sock" \
    >"$root/podman.log" 2>&1) &
podman_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || bail "the rootless podman service did not start: $(tail -3 "$root/podman.log")"

echo "# rootless: $user (uid $(id -u "$user")), podman $(as_user podman --version | awk '{print $3}'), image $image"
cd "$root/e2e" && as_user env CORRAL_ENGINE="unix://$sock" CORRAL_IMAGE="$image" CORRAL_IMAGES="$image" \
    CORRAL_BIN="$root/bin/corral" \
    E2E_ONLY='^(HTTP client|corral connect: (calls|a call)|two clients|MCP sessions|events|bridge|limits)' \
    node "$root/e2e/service.mjs"
