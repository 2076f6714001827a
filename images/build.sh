#!/bin/bash
# Build a sandbox root filesystem for corral from an image profile, as a
# plain tarball, with no container registry: Debian (essential packages) plus
# the profile's packages, made by mmdebstrap from a Debian mirror.
#
#   images/build.sh OUT.tar PROFILE [SUITE]
#
# PROFILE is a profile file (images/profiles/data.profile) or the name of one
# in images/profiles/ (data). The format is in images/README.md.
#
# Environment:
#   CORRAL_MIRROR  Debian mirror URI, or anything mmdebstrap takes as MIRROR.
#                  Default: the mmdebstrap default (deb.debian.org plus the
#                  updates and security suites).
#   CORRAL_SUITE   suite when no SUITE argument is given (default: bookworm).
#
# Runs mmdebstrap in root mode as root, otherwise in unshare mode (needs
# unprivileged user namespaces and subuid/subgid ranges).
#
# What the image gets besides its packages (all under /usr/share/corral):
#   profile.json   the profile's name, its packages with their versions, the
#                  modules to preload and the variables to set; the runtime
#                  reads it at start, `corral image build` labels the image
#                  from it
#   tmp/           files the runtime copies into /tmp at start (matplotlib's
#                  font cache, built here, since /tmp is its only writable
#                  place in a sandbox)
# and, where matplotlib is installed, the corral_matplotlib backend. It has
# no manual pages, translations, docs (copyright files stay), package lists,
# test suites of Python packages, recommended packages, or the packages the
# profile purges; Python's bytecode is compiled.
#
# Only the tarball is made here; `corral image build` imports it through the
# engine API. Nothing is written to stdout: progress goes to stderr.
set -euo pipefail

exec 1>&2 # nothing of ours or of mmdebstrap's may reach stdout

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    log "usage: $0 OUT.tar PROFILE [SUITE]   (PROFILE: a .profile file, or a name in $here/profiles)"
    exit 2
}

if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
case $1 in -h | --help) usage ;; esac

out=$1
profile=$2
suite=${3:-${CORRAL_SUITE:-bookworm}}
mirror=${CORRAL_MIRROR:-}

case $profile in
*/* | *.profile) ;;
*) profile=$here/profiles/$profile.profile ;;
esac
[ -r "$profile" ] || die "no profile at $profile"
name=$(basename -- "$profile" .profile)
[[ $name =~ ^[a-z0-9][a-z0-9_.-]{0,63}$ ]] ||
    die "profile name \"$name\" must be lower-case letters, digits, '.', '_' or '-' (at most 64)"

[ "$out" != - ] || die "OUT must be a file path, not stdout"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found (apt-get install mmdebstrap)"
command -v mmtarfilter >/dev/null || die "mmtarfilter not found (it ships with mmdebstrap)"
outdir=$(dirname -- "$out")
[ -d "$outdir" ] || die "output directory $outdir does not exist"

# ---- the profile
packages=()
warm=()
purge=()
preload=()
env=()
keep=()
daemon=
n=0
set -f # words of the profile are split, never matched against files
while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%%#*}
    case $line in
    preload:*)
        for m in ${line#preload:}; do
            [[ $m =~ ^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$ ]] ||
                die "$profile:$n: \"$m\" is not a Python module name"
            preload+=("$m")
        done
        ;;
    warm:*)
        w=${line#warm:}
        w=${w#"${w%%[![:space:]]*}"}
        [[ $w != *[[:cntrl:]]* ]] || die "$profile:$n: a control character in warm:"
        warm+=("$w")
        ;;
    purge:*)
        for p in ${line#purge:}; do
            [[ $p =~ ^[a-z0-9*][a-z0-9+.*-]*$ ]] || die "$profile:$n: \"$p\" is not a package name or pattern"
            purge+=("$p")
        done
        ;;
    daemon:*)
        d=${line#daemon:}
        d=${d//[[:space:]]/}
        [ "$d" = corral ] || die "$profile:$n: daemon: takes \"corral\" (the binary of \$CORRAL_BINARY)"
        daemon=$d
        ;;
    keep:*)
        for k in ${line#keep:}; do
            [[ $k =~ ^/[A-Za-z0-9_./+-]+$ && $k != *..* && $k != *//* && $k != */./* && $k != */. ]] ||
                die "$profile:$n: \"$k\" is not a plain absolute path (letters, digits, _ . + - and /, no . or .. parts)"
            keep+=("$k")
        done
        ;;
    env:*)
        kv=${line#env:}
        kv=${kv#"${kv%%[![:space:]]*}"}
        kv=${kv%"${kv##*[![:space:]]}"}
        [[ $kv =~ ^[A-Z_][A-Z0-9_]*=[^[:cntrl:]]*$ ]] || die "$profile:$n: want env: NAME=VALUE"
        env+=("$kv")
        ;;
    *)
        for p in $line; do
            [[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "$profile:$n: \"$p\" is not a Debian package name"
            packages+=("$p")
        done
        ;;
    esac
done <"$profile"
set +f
[ ${#packages[@]} -gt 0 ] || die "$profile names no package"
if [ -n "$daemon" ]; then
    # An image of corral itself: the binary that asked for the build.
    [ -n "${CORRAL_BINARY:-}" ] && [ -x "$CORRAL_BINARY" ] ||
        die "$profile makes an image of corral: set CORRAL_BINARY to the corral binary (\`corral image build\` does)"
else
    [ ${#keep[@]} -eq 0 ] || die "$profile: keep: is for daemon: images only"
    printf '%s\n' "${packages[@]}" | grep -qx python3 ||
        die "$profile must include python3: corral's runtime runs on it"
fi

if [ "$(id -u)" -eq 0 ]; then
    mode=root
else
    mode=unshare
    log "not root: mmdebstrap --mode=unshare (needs user namespaces and /etc/subuid, /etc/subgid entries for $(id -un))"
fi

# Write next to OUT, rename when complete: a failed or interrupted build
# never leaves a truncated tarball under the final name.
tmp=$(mktemp "$outdir/.build-$name.XXXXXX.tar")
meta=$(mktemp -d)
trap 'rm -rf -- "$tmp" "$meta"' EXIT
printf '%s\n' "${preload[@]+"${preload[@]}"}" >"$meta/preload"
printf '%s\n' "${env[@]+"${env[@]}"}" >"$meta/env"
printf '%s\n' "${purge[@]+"${purge[@]}"}" >"$meta/purge"
printf '%s\n' "${warm[@]+"${warm[@]}"}" >"$meta/warm"
printf '%s\n' "$name" >"$meta/name"
printf '%s\n' "${packages[@]}" >"$meta/packages"
printf '%s\n' "${keep[@]+"${keep[@]}"}" >"$meta/keep"
if [ -n "$daemon" ]; then
    install -m 0755 -- "$CORRAL_BINARY" "$meta/corral"
fi
cp -- "$here/corral_matplotlib.py" "$meta/"

# The hook runs on the host with the new root as $1; it reaches the profile's
# data through $meta (a path in this script's mount namespace, which root
# and unshare mode both keep).
# shellcheck disable=SC2016 # "$1" in the hooks is expanded by mmdebstrap
args=(
    --mode="$mode"
    --variant=essential
    --include="$(IFS=,; echo "${packages[*]}")"
    --format=tar
    # What the profile names and what that depends on, not what it recommends.
    --aptopt='APT::Install-Recommends "false"'
    # No manual pages, translations or docs (copyrights stay).
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    # The build host's resolver and name stay out (engines give both). No
    # /workspace: Docker copies an existing directory's mode (root 0755)
    # onto the tmpfs mounted there, which would make it unwritable.
    --customize-hook='rm -f "$1/etc/resolv.conf"; echo corral > "$1/etc/hostname"; chmod 0644 "$1/etc/hostname"'
    --customize-hook="$here/customize.sh \"\$1\" $meta"
    --
    "$suite"
    -
)
[ -z "$mirror" ] || args+=("$mirror")
# With keep:, the hook has removed apt and mmdebstrap's own files: nothing
# is left for mmdebstrap to clean up.
[ ${#keep[@]} -eq 0 ] || args=(--skip=cleanup "${args[@]}")

log "building profile $name: $suite + ${#packages[@]} packages ($mode mode${mirror:+, mirror $mirror}) -> $out"
start=$(date +%s)
# The tar goes through a pipe so that /dev is left out: the engine makes
# /dev at run time, and rootless engines cannot create device nodes.
mmdebstrap "${args[@]}" </dev/null | mmtarfilter --path-exclude='/dev/*' >"$tmp"
[ -s "$tmp" ] || die "mmdebstrap produced an empty tarball"
chmod 0644 "$tmp"
mv -f -- "$tmp" "$out"
log "done: $out ($(du -h -- "$out" | cut -f1), $(($(date +%s) - start)) s)"
