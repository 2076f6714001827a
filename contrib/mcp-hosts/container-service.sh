#!/bin/sh
# corral's service in a container: one `corral serve` for the laptop's
# hosts that take a streamable HTTP server, published on the loopback only,
# its token in a volume (README, "corral in a container"). Podman: set
# CORRAL_ENGINE_CLI=podman and CORRAL_SOCKET=/run/podman/podman.sock (or the
# rootless socket), and it adds --security-opt label=disable for SELinux.
set -eu
cli=${CORRAL_ENGINE_CLI:-docker}
sock=${CORRAL_SOCKET:-/var/run/docker.sock}
port=${CORRAL_PORT:-8765}
inner=/var/run/docker.sock # where corral looks in its container
label=
if [ "$cli" = podman ]; then
    inner=/run/podman/podman.sock
    label="--security-opt label=disable"
fi
if "$cli" container inspect corral >/dev/null 2>&1; then
    echo "a container named corral exists already: '$cli rm -f corral' to start again" >&2
    exit 1
fi
# http_public: corral listens on 0.0.0.0 of its own network namespace, which
# -p publishes on 127.0.0.1 alone; http_hosts: Host headers other than
# loopback names are refused (DNS rebinding).
# shellcheck disable=SC2086 # $label is two words or none
"$cli" run -d --name corral --restart unless-stopped $label \
    -p "127.0.0.1:$port:$port" \
    -v "$sock:$inner" \
    -v corral-config:/root/.config/corral \
    -v corral-state:/root/.local/state \
    -e CORRAL_HTTP_PUBLIC=true -e CORRAL_HTTP_HOSTS=localhost \
    corral:latest serve --listen "tcp:0.0.0.0:$port"
# The token the hosts send (Authorization: Bearer TOKEN; http.mcp.json),
# written by the service into the volume as it starts. The image has no
# shell, so it comes out as the engine's tar of the file.
i=0
until "$cli" cp corral:/root/.config/corral/token - 2>/dev/null | tar -xOf -; do
    i=$((i + 1))
    [ "$i" -lt 20 ] || { echo "no token after 10 s: '$cli logs corral' says why" >&2; exit 1; }
    sleep 0.5
done
echo
