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

# An image of corral itself (a profile with "daemon: corral"): the binary,
# checked to find every library it loads in the image; with "keep:" lines,
# only the binary, those libraries (each link and its file), the kept paths
# and the copyright files of the packages they come from stay. Then its
# profile.json (written by the build host's python3: the image may have
# none).
daemon_image() {
    install -m 0755 "$meta/corral" "$root/usr/bin/corral"
    libs=$(chroot "$root" ldd /usr/bin/corral) || {
        log "error: ldd /usr/bin/corral failed in the image"
        exit 1
    }
    if echo "$libs" | grep -q 'not found'; then
        log "error: the image lacks libraries corral loads (build corral on Debian bookworm, or add their packages to the profile):"
        echo "$libs" | grep 'not found' >&2
        exit 1
    fi
    chroot "$root" /usr/bin/corral version >/dev/null || {
        log "error: corral does not run in the image"
        exit 1
    }
    chroot "$root" dpkg-query -W -f '${Package}\t${Version}\n' >"$meta/versions"
    if grep -q . "$meta/keep"; then
        paths=$(echo "$libs" | grep -o '/[^ ]*' | sort -u)
        # Each path as its canonical name (merged /usr: /lib is usr/lib)
        # and what it links to, relative to the root.
        list=$meta/keep-list
        : >"$list"
        for p in /usr/bin/corral $paths; do
            chroot "$root" sh -c 'printf "%s/%s\n%s\n" "$(readlink -f "$(dirname "$1")")" "$(basename "$1")" "$(readlink -f "$1")"' sh "$p" >>"$list"
        done
        # The packages those files come from, for their copyright files
        # (and profile.json).
        owners=$(for p in $paths; do chroot "$root" dpkg -S "$(basename "$(chroot "$root" readlink -f "$p")")" 2>/dev/null; done |
            cut -d: -f1 | tr ',' '\n' | tr -d ' ' | sort -u)
        for o in $owners; do
            [ -e "$root/usr/share/doc/$o/copyright" ] && echo "/usr/share/doc/$o/copyright" >>"$list"
        done
        echo "$owners" | awk -F '\t' 'NR == FNR { own[$1] = 1; next } own[$1]' - "$meta/versions" >"$meta/versions.kept"
        mv "$meta/versions.kept" "$meta/versions"
        while read -r k; do
            [ -z "$k" ] || [ -e "$root$k" ] || [ -L "$root$k" ] || {
                log "error: keep: $k is not in the image"
                exit 1
            }
        done <"$meta/keep"
        # under merged /usr's names, as the libraries are (/lib/x is usr/lib/x)
        while read -r k; do
            [ -z "$k" ] || chroot "$root" sh -c 'printf "%s/%s\n" "$(readlink -f "$(dirname "$1")")" "$(basename "$1")"' sh "$k"
        done <"$meta/keep" >>"$list"
        echo /usr/share/corral >>"$list"
        # merged /usr's links at the top (/lib64 leads to the loader)
        for l in "$root"/*; do
            [ -L "$l" ] && echo "/${l##*/}" >>"$list"
        done
        mkdir -p "$share"
        n_before=$(du -sm -x "$root" | cut -f1)
        # Remove every file and link not on the list, then the directories
        # left empty. Never under /proc, /sys or /dev, which mmdebstrap has
        # mounted for its hooks, and never across a mount.
        sed 's|^/|./|' "$list" | sort -u >"$list.rel"
        (cd "$root" && while read -r k; do
            if [ -d "$k" ] && [ ! -L "$k" ]; then find "$k" -xdev; else echo "$k"; fi
        done <"$list.rel") | sort -u >"$list.all"
        (cd "$root" && find . -xdev -mindepth 1 \( -path ./proc -o -path ./sys -o -path ./dev \) -prune \
            -o \( -type f -o -type l \) -print) | sort >"$list.have"
        (cd "$root" && comm -23 "$list.have" "$list.all" | tr '\n' '\0' | xargs -0 -r rm -f --)
        # (children first: sort -r, as -prune does nothing beside -depth)
        (cd "$root" && find . -xdev -mindepth 1 \( -path ./proc -o -path ./sys -o -path ./dev \) -prune \
            -o -type d -print | sort -r | grep -vxE '\./(tmp|root|run|etc|var|var/tmp|usr/share/corral)' |
            tr '\n' '\0' | xargs -0 -r rmdir --ignore-fail-on-non-empty --)
        mkdir -p "$root/run" "$root/var/tmp" "$share"
        # mmdebstrap's own clean-up is skipped for these images (apt is
        # gone): its files in /tmp go here (its apt.conf names build paths).
        find "$root/tmp" -xdev -mindepth 1 -delete
        chmod 1777 "$root/tmp" "$root/var/tmp"
        chroot "$root" /usr/bin/corral version >/dev/null || {
            log "error: corral does not run in the pruned image (a library it loads was removed)"
            exit 1
        }
        log "kept corral, $(echo "$paths" | wc -w) libraries and $(wc -l <"$meta/keep") more paths: ${n_before} MiB -> $(du -sm -x "$root" | cut -f1) MiB"
    fi
    {
        cat "$meta/name"
        cat "$meta/packages"
        echo --versions
        cat "$meta/versions"
    } | python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
name, i = lines[0], lines.index("--versions")
d = {"profile": name, "daemon": "corral", "requested": lines[1:i], "packages": {},
     "preload": [], "env": {}, "warm": ""}
for line in lines[i + 1:]:
    p, v = line.split("\t", 1)
    d["packages"][p] = v
json.dump(d, sys.stdout, indent=1, sort_keys=True)
' >"$share/profile.json"
    chmod -R a+rX "$share"
}

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
if [ -s "$meta/corral" ]; then
    daemon_image # (below) and nothing of the sandbox images' Python
    exit 0
fi
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
