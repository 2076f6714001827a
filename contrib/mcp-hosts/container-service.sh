#!/bin/sh
# corral's service in a container: one `corral serve` for every host of
# this laptop, published on the loopback only, its token in a volume
# (README, "corral in a container"). Podman: replace docker with podman and
# the socket with /run/podman/podman.sock (or the rootless one).
set -eu
port=${CORRAL_PORT:-8765}
docker run -d --name corral --restart unless-stopped \
    -p "127.0.0.1:$port:$port" \
    -v /var/run/docker.sock:/var/run/docker.sock \
    -v corral-config:/root/.config/corral \
    -v corral-state:/root/.local/state \
    -e CORRAL_HTTP_PUBLIC=true \
    corral:latest serve --listen "tcp:0.0.0.0:$port"
# The token the hosts send (Authorization: Bearer TOKEN; http.mcp.json),
# written by the service into the volume on its first start. The image has
# no shell, so it comes out as docker cp's tar:
sleep 2
docker cp corral:/root/.config/corral/token - | tar -xO
