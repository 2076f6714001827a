#!/bin/sh
# The engine-free state-machine tests can fail: in a copy of the source,
# each mutation below breaks one transition (of a sandbox, daemon/sandbox/,
# seen by test-lifecycle; of an upstream server, daemon/upstream/, seen by
# test-upstream) or the table of requests in flight (daemon/mcp/request.c,
# seen by test-mcp), and the test built from it must report a failure at the
# assertion named; the copy unmutated must pass (so the failures are the
# mutations', not the copy's).
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

# The tracked files and any new ones not yet committed, as they are now.
(cd "$src" && git ls-files --cached --others --exclude-standard -z | xargs -0 tar -cf - 2>/dev/null) |
    (mkdir -p "$tmp/src" && cd "$tmp/src" && tar -xf -)
meson setup "$tmp/build" "$tmp/src" >"$tmp/setup.log" 2>&1
check $? "a build of the copy is set up"

# What a test program is run with (test-upstream: its fake server).
test_args() {
    case $1 in
    test-upstream)
        ninja -C "$tmp/build" tests/fake-upstream >/dev/null 2>&1
        echo "$tmp/build/tests/fake-upstream"
        ;;
    esac
}

# mutate DIR/FILE TEST DESCRIPTION SED-SCRIPT EXPECTED-FAILURE
#   (DIR under daemon/; TEST the test program that must notice)
mutate() {
    file=$tmp/src/daemon/$1
    test=$2
    shift 2
    cp "$file" "$tmp/orig"
    sed -i "$2" "$file"
    if cmp -s "$file" "$tmp/orig"; then
        check 1 "$1: the mutation applies"
        check 1 "$1: the test fails"
        cp "$tmp/orig" "$file"
        return
    fi
    check 0 "$1: the mutation applies"
    ninja -C "$tmp/build" "tests/$test" >"$tmp/build.log" 2>&1 || {
        check 1 "$1: the test fails (the mutant did not build)"
        sed 's/^/# /' "$tmp/build.log" | tail -20
        cp "$tmp/orig" "$file"
        return
    }
    "$tmp/build/tests/$test" $(test_args "$test") >"$tmp/run.log" 2>&1
    rc=$?
    grep -q "^not ok .*$3" "$tmp/run.log"
    found=$?
    [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]
    check $? "$1: $test fails (exit $rc), at \"$3\""
    grep '^not ok' "$tmp/run.log" | head -5 | sed 's/^/# /'
    cp "$tmp/orig" "$file"
}

# The start's answer no longer moves a sandbox from starting to started.
mutate sandbox/sandbox.c test-lifecycle "starting -> started dropped" \
    's/sandbox_set_state(s, S_STARTED);/(void)0;/' \
    "cold run: the log shows each transition"
# The state table no longer allows started -> busy.
mutate sandbox/sandbox.c test-lifecycle "started -> busy forbidden" \
    '/\[S_STARTED\] = /s/ | TO(S_BUSY)//' \
    "no transition the state table forbids"
# A session's run no longer returns its sandbox to idle.
mutate sandbox/run.c test-lifecycle "busy -> idle dropped" \
    's/sandbox_set_state(s, S_IDLE);/(void)0;/' \
    "kept: idle after it"
# The upstream state table no longer allows starting -> ready.
mutate upstream/client.c test-upstream "upstream starting -> ready forbidden" \
    '/\[U_STARTING\] = /s/TO(U_READY) | //' \
    "normal: ready once started"
# notifications/cancelled no longer reaches the request's kind.
mutate mcp/request.c test-mcp "a withdrawal not handed to its kind" \
    's/^        r->ops->withdraw(r);/        (void)0;/' \
    "run_python: withdrawn, its run ends"
# The table no longer finds a request by its id.
mutate mcp/request.c test-mcp "no request found by its id" \
    's/if (jrpc_id_equal(r->id, id)) return r;/if (0) return r;/' \
    "a second request with its id is refused"

for t in test-lifecycle test-upstream test-mcp; do
    ninja -C "$tmp/build" "tests/$t" >"$tmp/build.log" 2>&1
    check $? "the copy unmutated builds $t"
    "$tmp/build/tests/$t" $(test_args "$t") >"$tmp/run.log" 2>&1
    check $? "and $t passes"
done
# The plan comes last: it counts whatever ran above.
echo "1..$n"
