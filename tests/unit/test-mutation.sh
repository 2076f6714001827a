#!/bin/sh
# The engine-free state-machine test (test-lifecycle) can fail: in a copy
# of the source, each mutation below breaks one transition of a sandbox
# (daemon/sandbox/), and the test built from it must report a failure at
# the assertion named; the copy unmutated must pass (so the failures are
# the mutations', not the copy's).
#   test-mutation.sh SOURCE_ROOT        (TAP on stdout)
set -u
src=$1
tmp=$(mktemp -d /tmp/corral-mutation.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
n=0
check() { # check OK? DESCRIPTION
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
echo "TAP version 13"
echo "1..9"

# The tracked files and any new ones not yet committed, as they are now.
(cd "$src" && git ls-files --cached --others --exclude-standard -z | xargs -0 tar -cf - 2>/dev/null) |
    (mkdir -p "$tmp/src" && cd "$tmp/src" && tar -xf -)
meson setup "$tmp/build" "$tmp/src" >"$tmp/setup.log" 2>&1
check $? "a build of the copy is set up"

# mutate FILE DESCRIPTION SED-SCRIPT EXPECTED-FAILURE
mutate() {
    file=$tmp/src/daemon/sandbox/$1
    shift
    cp "$file" "$tmp/orig"
    sed -i "$2" "$file"
    if cmp -s "$file" "$tmp/orig"; then
        check 1 "$1: the mutation applies"
        check 1 "$1: the test fails"
        cp "$tmp/orig" "$file"
        return
    fi
    check 0 "$1: the mutation applies"
    ninja -C "$tmp/build" tests/test-lifecycle >"$tmp/build.log" 2>&1 || {
        check 1 "$1: the test fails (the mutant did not build)"
        sed 's/^/# /' "$tmp/build.log" | tail -20
        cp "$tmp/orig" "$file"
        return
    }
    "$tmp/build/tests/test-lifecycle" >"$tmp/run.log" 2>&1
    rc=$?
    grep -q "^not ok .*$3" "$tmp/run.log"
    found=$?
    [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]
    check $? "$1: the test fails (exit $rc), at \"$3\""
    grep '^not ok' "$tmp/run.log" | head -5 | sed 's/^/# /'
    cp "$tmp/orig" "$file"
}

# The start's answer no longer moves a sandbox from starting to started.
mutate sandbox.c "starting -> started dropped" \
    's/sandbox_set_state(s, S_STARTED);/(void)0;/' \
    "cold run: the log shows each transition"
# The state table no longer allows started -> busy.
mutate sandbox.c "started -> busy forbidden" \
    '/\[S_STARTED\] = /s/ | TO(S_BUSY)//' \
    "no transition the state table forbids"
# A session's run no longer returns its sandbox to idle.
mutate run.c "busy -> idle dropped" \
    's/sandbox_set_state(s, S_IDLE);/(void)0;/' \
    "kept: idle after it"

ninja -C "$tmp/build" tests/test-lifecycle >"$tmp/build.log" 2>&1
check $? "the copy unmutated builds"
"$tmp/build/tests/test-lifecycle" >"$tmp/run.log" 2>&1
check $? "and its test passes"
