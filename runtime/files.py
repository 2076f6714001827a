# /workspace as the supervisor sees it: what a run wrote under /workspace/out
# (scanned before and after it), the files it sends inline, sandbox/list, and
# the container's memory figure.


_memory_source = []                # where memory_bytes found its figure, once found


def _read_small(path):
    """A small file's bytes in three calls (open, read, close): under gVisor
    every system call costs tens of microseconds, and this runs per call."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 8192)
    finally:
        os.close(fd)


def _meminfo_used(path='/proc/meminfo'):
    fields = {}
    for line in _read_small(path).decode('ascii', 'replace').splitlines():
        key, _, value = line.partition(':')
        if key in ('MemTotal', 'MemFree'):
            fields[key] = int(value.split()[0]) * 1024
    return fields['MemTotal'] - fields['MemFree']


def memory_bytes():
    """The container's memory use (its cgroup's), or None outside one.
    Under gVisor the code sees no cgroup (an empty /proc/self/cgroup); there
    gVisor's own /proc/meminfo counts the sandbox's memory against its
    limit: MemTotal is the limit, MemTotal - MemFree what is used. The
    source found first is kept for the sandbox's later calls."""
    if _memory_source:
        kind, path = _memory_source[0]
        try:
            if kind == 'cgroup':
                return int(_read_small(path).split()[0])
            return _meminfo_used(path)
        except (OSError, ValueError, IndexError, KeyError):
            return None
    for path in MEMORY_FILES:
        try:
            value = int(_read_small(path).split()[0])
        except (OSError, ValueError, IndexError):
            continue
        _memory_source.append(('cgroup', path))
        return value
    try:
        if _read_small('/proc/self/cgroup').strip():
            return None
        value = _meminfo_used()
    except (OSError, ValueError, IndexError, KeyError):
        return None
    _memory_source.append(('meminfo', '/proc/meminfo'))
    return value


def out_scan():
    """Regular files under /workspace/out: {path: (mtime_ns, size, inode)},
    paths relative to /workspace.  Bounded, symlinks not followed, names
    that are not UTF-8 skipped."""
    found, stack, seen = {}, [(OUT_DIR, 0)], 0
    while stack and seen < OUT_SCAN_MAX:
        path, depth = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            seen += 1
            try:
                name = e.path.encode('utf-8').decode('utf-8')
                st = e.stat(follow_symlinks=False)
            except (UnicodeError, OSError):
                continue
            if e.is_dir(follow_symlinks=False):
                if depth < OUT_DEPTH_MAX:
                    stack.append((e.path, depth + 1))
            elif e.is_file(follow_symlinks=False):
                found[name[len(WORKSPACE) + 1:]] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return found


def out_files(before):
    """The files under /workspace/out that are new or changed since the scan
    `before` (a run's own: compared by content stamps, not clocks), for the
    daemon to fetch: [{path, size}], at most OUT_FILES_MAX; and whether a
    file of `before` is gone."""
    now = out_scan() if os.path.isdir(OUT_DIR) else {}
    changed = sorted(p for p, stamp in now.items() if before.get(p) != stamp)
    return [{'path': p, 'size': now[p][1]} for p in changed[:OUT_FILES_MAX]], \
        any(p not in now for p in before)


def read_out_file(rel, most):
    """The bytes of WORKSPACE/rel, a regular file of at most `most` bytes,
    or None.  Opened a component at a time with O_NOFOLLOW, so that no
    symlink on the path is followed (this process is PID 1: through /proc/1
    a link could reach its own descriptors)."""
    parts = rel.split('/')
    if not parts or any(p in ('', '.', '..') for p in parts):
        return None
    fd = None
    try:
        fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY)
        for p in parts[:-1]:
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)
    try:
        import stat
        if not stat.S_ISREG(os.fstat(ffd).st_mode):
            return None
        data = bytearray()
        while len(data) <= most:
            chunk = os.read(ffd, min(CHUNK, most + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
        return None
    except OSError:
        return None
    finally:
        os.close(ffd)


def inline_out_files(result, budget):
    """Put what fits of the run's /workspace/out files into its result, as
    base64 `data`, in order, within `budget` bytes of base64: the daemon then
    need not fetch them through the engine (a round trip each).  For a
    single-use run, once every process of its code is gone: nothing can
    change a file while it is read."""
    import binascii
    for f in result.get('out_files') or ():
        size = f.get('size', 0)
        if 4 * ((size + 2) // 3) > budget:
            continue
        data = read_out_file(f['path'], size)
        if data is None or len(data) != size:
            continue
        f['data'] = binascii.b2a_base64(data, newline=False).decode('ascii')
        budget -= len(f['data'])


def list_dir(params, max_bytes=DEFAULT_MAX_FRAME // 2):
    """sandbox/list: the entries of a directory under /workspace (lstat: a
    symlink is listed, not followed), at most `limit` of them and about
    max_bytes of JSON (names may escape to six bytes a byte).  Returns
    (result, None) or (None, message)."""
    p = params if isinstance(params, dict) else {}
    path, recursive, limit = p.get('path', WORKSPACE), p.get('recursive', False), p.get('limit', 1000)
    if not isinstance(path, str) or not isinstance(recursive, bool) or not isinstance(limit, int) \
            or isinstance(limit, bool) or not 1 <= limit <= LIST_MAX:
        return None, 'invalid params: want path string, recursive boolean, limit 1..%d' % LIST_MAX
    real = os.path.realpath(path)
    if real != WORKSPACE and not real.startswith(WORKSPACE + '/'):
        return None, '%s resolves to %s, outside %s' % (path, real, WORKSPACE)
    try:
        st = os.stat(real)
    except OSError as e:
        return None, '%s: %s' % (path, e.strerror)
    if not os.path.isdir(real):
        return {'path': real, 'entries': [entry(real, st, os.path.basename(real))],
                'truncated': False}, None
    entries, stack, truncated, size = [], [(real, 0)], False, 0
    while stack and not truncated:
        d, depth = stack.pop()
        try:
            items = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for e in items:
            try:
                rel = e.path[len(real) + 1:].encode('utf-8').decode('utf-8')
                est = e.stat(follow_symlinks=False)
            except (UnicodeError, OSError):
                continue
            ent = entry(e.path, est, rel)
            size += len(encode(ent))
            if len(entries) >= limit or size > max_bytes:
                truncated = True
                break
            entries.append(ent)
            if recursive and e.is_dir(follow_symlinks=False) and depth < LIST_DEPTH_MAX:
                subdirs.append((e.path, depth + 1))
        stack += reversed(subdirs)
    return {'path': real, 'entries': entries, 'truncated': truncated}, None


def entry(path, st, rel):
    import stat as s
    kind = 'dir' if s.S_ISDIR(st.st_mode) else 'file' if s.S_ISREG(st.st_mode) \
        else 'symlink' if s.S_ISLNK(st.st_mode) else 'other'
    e = {'path': rel, 'type': kind, 'size': st.st_size, 'mode': '%04o' % s.S_IMODE(st.st_mode),
         'mtime': int(st.st_mtime)}
    if kind == 'symlink':
        try:
            e['target'] = os.readlink(path)
        except OSError:
            pass
    return e
