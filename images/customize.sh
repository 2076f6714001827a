#!/bin/sh
# mmdebstrap customize hook of images/build.sh:  customize.sh ROOT META
#
# ROOT is the new root filesystem; META a directory build.sh fills with the
# profile's name, packages, purge patterns, preload list, env and warm
# lines, and corral_matplotlib.py. Runs as
# root (in unshare mode: root of the build's user namespace).
set -eu
root=$1
meta=$2
log() { printf 'build: %s\n' "$*" >&2; }
dist=$root/usr/lib/python3/dist-packages
share=$root/usr/share/corral

# Packages the profile purges (patterns as dpkg-query takes them), whatever
# depends on them: dpkg still refuses to remove an essential one.
pkgs=$(while read -r pat; do
    [ -n "$pat" ] && chroot "$root" dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' "$pat" 2>/dev/null || true
done <"$meta/purge" | awk '$1 == "ii" { print $2 }' | sort -u)
if [ -n "$pkgs" ]; then
    log "purging $(echo "$pkgs" | wc -l) packages: $(echo $pkgs)"
    # shellcheck disable=SC2086 # one word a package
    chroot "$root" dpkg --purge --force-depends $pkgs >/dev/null
fi

# What a sandbox never reads: package lists and caches, and the test suites
# Python packages ship (pandas' alone is tens of MiB). "tests" only:
# numpy.testing and the like are imported by the libraries themselves.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/debconf/*-old
rm -f "$root"/usr/share/unicode/*Test*.txt # Unicode's conformance tests
if [ -d "$dist" ]; then
    find "$dist" -depth -type d -name tests -exec rm -rf {} +
fi

mkdir -p "$share"
if [ -d "$dist/matplotlib" ]; then
    log "matplotlib: the corral_matplotlib backend and the font cache"
    install -m 0644 "$meta/corral_matplotlib.py" "$dist/corral_matplotlib.py"
    mkdir -p "$share/tmp/matplotlib"
    chroot "$root" env HOME=/nonexistent MPLBACKEND=Agg MPLCONFIGDIR=/usr/share/corral/tmp/matplotlib \
        python3 -c 'import matplotlib.font_manager as f; assert f.fontManager.ttflist' >&2
fi

# Bytecode for whatever the packages' own postinst did not compile, so a
# first import in a read-only sandbox reads .pyc instead of compiling.
log "compiling Python bytecode"
chroot "$root" python3 -m compileall -q -j 1 /usr/lib/python3/dist-packages /usr/lib/python3 >/dev/null 2>&1 || true

# profile.json: the profile, the packages it asked for, every package with
# its version, and what the runtime does at start. Written by the image's
# own python3.
chroot "$root" dpkg-query -W -f '${Package}\t${Version}\n' >"$meta/versions"
{
    cat "$meta/name"
    echo '--requested'
    cat "$meta/packages"
    echo '--preload'
    cat "$meta/preload"
    echo '--env'
    cat "$meta/env"
    echo '--warm'
    cat "$meta/warm"
    echo '--versions'
    cat "$meta/versions"
} | chroot "$root" python3 -c '
import json, sys
name, part, d = None, None, {"requested": [], "preload": [], "env": {}, "packages": {}, "warm": ""}
for line in sys.stdin.read().splitlines():
    if name is None:
        name = line
    elif line.startswith("--"):
        part = line[2:]
    elif not line:
        continue
    elif part == "warm":
        d["warm"] += line + "\n"
    elif part == "requested":
        d["requested"].append(line)
    elif part == "preload":
        d["preload"].append(line)
    elif part == "env":
        k, v = line.split("=", 1)
        d["env"][k] = v
    elif part == "versions":
        p, v = line.split("\t", 1)
        d["packages"][p] = v
d = {"profile": name, **d}
json.dump(d, sys.stdout, indent=1, sort_keys=True)
' >"$share/profile.json"
chmod -R a+rX "$share"
log "profile.json: $(wc -c <"$share/profile.json") bytes"
