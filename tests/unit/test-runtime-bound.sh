#!/bin/sh
# The build refuses a sandbox runtime over its bound (meson option
# runtime_max, runtime/assemble.py): a throwaway build with a small bound
# fails at the runtime's target and says why; one with the default builds.
#   test-runtime-bound.sh SOURCE_ROOT        (TAP on stdout)
set -u
src=$1
tmp=$(mktemp -d /tmp/corral-bound.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
n=0
check() { # check OK? DESCRIPTION
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
echo "TAP version 13"
echo "1..5"
meson setup "$tmp/small" "$src" -Druntime_max=4096 >"$tmp/setup.log" 2>&1
check $? "meson setup with runtime_max 4096"
ninja -C "$tmp/small" runtime_src.c >"$tmp/small.log" 2>&1
rc=$?
check $((rc == 0)) "the build fails when the assembled runtime is over its bound"
grep -q "over its bound of 4096" "$tmp/small.log"
check $? "and says the runtime's size and its bound"
[ ! -s "$tmp/small/runtime_src.c" ]
check $? "no runtime is embedded"
meson setup "$tmp/default" "$src" >"$tmp/setup2.log" 2>&1 && ninja -C "$tmp/default" runtime_src.c >"$tmp/default.log" 2>&1
check $? "with the default bound the runtime builds"
