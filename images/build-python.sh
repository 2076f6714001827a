#!/bin/bash
# Build corral's default sandbox root filesystem as a plain tarball, with no
# container registry: Debian (essential packages only) plus python3, made by
# mmdebstrap from a Debian mirror.
#
#   images/build-python.sh OUT.tar [SUITE]
#
# Environment:
#   CORRAL_MIRROR  Debian mirror URI, or anything mmdebstrap takes as MIRROR
#                  (a "deb ..." line, a sources.list file). Default: the
#                  mmdebstrap default, deb.debian.org plus updates/security.
#   CORRAL_SUITE   suite when no SUITE argument is given (default: bookworm).
#
# Runs mmdebstrap in root mode when run as root, otherwise in unshare mode
# (needs unprivileged user namespaces and subuid/subgid ranges).
#
# Only the tarball is made here. `corral image build` runs this script and
# then imports the tarball through the engine API (POST /images/create
# ?fromSrc=-) as corral-python:latest. stdout is never written to: all
# progress goes to stderr.
set -euo pipefail

exec 1>&2 # nothing of ours or of mmdebstrap's may reach stdout

log() { printf 'build-python: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    log "usage: $0 OUT.tar [SUITE]   (env: CORRAL_MIRROR, CORRAL_SUITE)"
    exit 2
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
case $1 in -h | --help) usage ;; esac

out=$1
suite=${2:-${CORRAL_SUITE:-bookworm}}
mirror=${CORRAL_MIRROR:-}

[ "$out" != - ] || die "OUT must be a file path, not stdout"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found (apt-get install mmdebstrap)"
command -v mmtarfilter >/dev/null || die "mmtarfilter not found (it ships with mmdebstrap)"

outdir=$(dirname -- "$out")
[ -d "$outdir" ] || die "output directory $outdir does not exist"

if [ "$(id -u)" -eq 0 ]; then
    mode=root
else
    mode=unshare
    log "not root: using mmdebstrap --mode=unshare (needs user namespaces and /etc/subuid, /etc/subgid entries for $(id -un))"
fi

# Write next to OUT, rename when complete, so a failed or interrupted build
# never leaves a truncated tarball under the final name.
tmp=$(mktemp "$outdir/.build-python.XXXXXX.tar")
trap 'rm -f -- "$tmp"' EXIT

# shellcheck disable=SC2016 # "$1" in the hook is expanded by mmdebstrap
args=(
    --mode="$mode"
    --variant=essential
    --include=python3
    --format=tar
    # Smaller image: no manual pages, translations or docs (keep copyrights).
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    # Do not carry the build host's resolver config or name into the image
    # (engines provide both at run time). No /workspace directory: Docker
    # copies an existing directory's mode (root 0755) onto the tmpfs mounted
    # there, which would make it unwritable for the sandbox user.
    --customize-hook='rm -f "$1/etc/resolv.conf"; echo corral > "$1/etc/hostname"; chmod 0644 "$1/etc/hostname"'
    --
    "$suite"
    -
)
[ -z "$mirror" ] || args+=("$mirror")

log "building $suite + python3 ($mode mode${mirror:+, mirror $mirror}) -> $out"
# The tar goes to a pipe so that device nodes under /dev can be dropped: the
# engine makes /dev at run time, and rootless engines cannot create device
# nodes when they unpack an image.
mmdebstrap "${args[@]}" </dev/null | mmtarfilter --path-exclude='/dev/*' >"$tmp"
# pipefail makes a failed mmdebstrap fail the line above.

[ -s "$tmp" ] || die "mmdebstrap produced an empty tarball"
chmod 0644 "$tmp"
mv -f -- "$tmp" "$out"
trap - EXIT
log "done: $out ($(du -h -- "$out" | cut -f1))"
