#!/bin/sh
# The daemon's layers point one way (daemon/README.md, "Layers"): a folder
# includes no header of a folder above it or beside it. Each rule names a
# folder under daemon/ and the folders whose headers it must not include;
# a break is reported as FILE:LINE with the include. A first check plants
# a break in a throwaway tree, so the test proves it can fail.
#   test-layers.sh SOURCE_ROOT        (TAP on stdout)
set -u
src=$1

# folder: what it must not include, and why
rules='
engine:sandbox bridge upstream mcp cli:the engine client serves the sandbox layer, and knows nothing above it
sandbox:bridge upstream mcp cli:a run hands its MCP frames to a hook (sandbox_frame_ops) that mcp/run.c wires to the bridge
upstream:engine sandbox bridge mcp cli:the MCP client side knows no sandbox and no bridge
bridge:engine sandbox mcp cli:the bridge sees a run only through the send function it is given
mcp:engine cli:the MCP layer reaches the engine only through the sandbox manager (sandbox_mgr_health)
'

# Prints each include of a forbidden folder under ROOT/daemon/DIR.
breaks() { # breaks ROOT DIR FORBIDDEN...
    root=$1 dir=$2
    shift 2
    alt=$(echo "$*" | tr ' ' '|')
    [ -d "$root/daemon/$dir" ] || return 0
    (cd "$root" && find "daemon/$dir" -type f \( -name '*.c' -o -name '*.h' \) | sort |
        xargs grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($alt)/" /dev/null)
}

n=0
ok() { # ok PASSED DESCRIPTION [DETAIL]
    n=$((n + 1))
    if [ "$1" = 1 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        printf '%s\n' "$3" | sed 's/^/# /'
    fi
}

echo "TAP version 13"
echo "1..$(($(printf '%s\n' "$rules" | grep -c .) + 1))"

tmp=$(mktemp -d /tmp/corral-layers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/daemon/sandbox"
printf '#include "core/log.h"\n  # include "bridge/bridge.h"\n' >"$tmp/daemon/sandbox/run.c"
found=$(breaks "$tmp" sandbox bridge upstream mcp cli)
[ "$found" = 'daemon/sandbox/run.c:2:  # include "bridge/bridge.h"' ]
ok $((1 - $?)) "a planted include of bridge/ under sandbox/ is found, with its file and line" \
    "found: $found"

printf '%s\n' "$rules" | grep . | while IFS=: read -r dir forbidden why; do
    if [ ! -d "$src/daemon/$dir" ]; then
        # A folder renamed or gone: the rule checks nothing until it is mended.
        ok 0 "daemon/$dir/ includes nothing of $forbidden" "daemon/$dir/ does not exist"
        continue
    fi
    found=$(breaks "$src" "$dir" $forbidden)
    if [ -z "$found" ]; then
        ok 1 "daemon/$dir/ includes nothing of $forbidden"
    else
        ok 0 "daemon/$dir/ includes nothing of $forbidden" \
            "$(printf '%s\n%s' "$found" "($why)")"
    fi
done
