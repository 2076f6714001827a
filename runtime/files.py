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


def memory_pss():
    """(kB, processes): the PSS of this process and every process under
    it, for the daemon's pool (sandbox/memory).  It cannot read our smaps
    itself: we are not dumpable (the frames' key) and it keeps no
    capability to.  A process whose smaps cannot be read (gone meanwhile;
    none under gVisor) is not counted."""
    ours = [os.getpid()] + descendants(os.getpid())  # supervisor.py
    kb = n = 0
    for pid in ours:
        try:
            with open('/proc/%d/smaps_rollup' % pid) as f:
                for line in f:
                    if line.startswith('Pss:'):
                        kb += int(line.split()[1])
                        n += 1
                        break
        except (OSError, ValueError, IndexError):
            pass
    return kb, n


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
    # From here on nothing is followed: the resolved path is opened a
    # component at a time with O_NOFOLLOW, and the listing reads open
    # directories. Code that swaps a component for a link meanwhile (to
    # /proc/1, whose entries this process could read) gets an error.
    names = [n for n in real[len(WORKSPACE):].split('/') if n]
    try:
        fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return None, '%s: %s' % (path, e.strerror)
    try:
        for i, name in enumerate(names):
            if i == len(names) - 1:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat_isdir(st):
                    one = entry(name, st, name, fd)
                    os.close(fd)
                    return {'path': real, 'entries': [one], 'truncated': False}, None
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except OSError as e:
        os.close(fd)
        return None, '%s: %s' % (path, e.strerror)
    entries, stack, truncated, size = [], [(fd, '', 0)], False, 0
    try:
        while stack and not truncated:
            d, prefix, depth = stack.pop()
            try:
                items = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                os.close(d)
                continue
            subdirs = []
            for e in items:
                try:
                    rel = (prefix + e.name).encode('utf-8').decode('utf-8')
                    est = e.stat(follow_symlinks=False)
                except (UnicodeError, OSError):
                    continue
                ent = entry(e.name, est, rel, d)
                size += len(encode(ent))
                if len(entries) >= limit or size > max_bytes:
                    truncated = True
                    break
                entries.append(ent)
                if recursive and stat_isdir(est) and depth < LIST_DEPTH_MAX:
                    try:
                        sub = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=d)
                    except OSError:
                        continue
                    subdirs.append((sub, rel + '/', depth + 1))
            os.close(d)
            stack += reversed(subdirs)
    finally:
        for d, _, _ in stack:
            os.close(d)
    return {'path': real, 'entries': entries, 'truncated': truncated}, None


def stat_isdir(st):
    import stat as s
    return s.S_ISDIR(st.st_mode)


def entry(name, st, rel, dir_fd):
    """One entry of sandbox/list: `name` in the open directory dir_fd."""
    import stat as s
    kind = 'dir' if s.S_ISDIR(st.st_mode) else 'file' if s.S_ISREG(st.st_mode) \
        else 'symlink' if s.S_ISLNK(st.st_mode) else 'other'
    e = {'path': rel, 'type': kind, 'size': st.st_size, 'mode': '%04o' % s.S_IMODE(st.st_mode),
         'mtime': int(st.st_mtime)}
    if kind == 'symlink':
        try:
            e['target'] = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            pass
    return e


# ---- sandbox/file/read and sandbox/file/write: the daemon's file tools,
# done here with the sandbox's own rights.  Paths are walked a component at
# a time from an open /workspace with O_NOFOLLOW: a symlink is read, never
# opened, and followed by hand only when it leads to a place inside
# /workspace (this process is PID 1: a link through /proc/1 must never lead
# to its own descriptors).  Each request stands alone (no state kept between
# the chunks of one file): every chunk's path is walked again.

FILE_HOPS = 40  # symlinks followed in one walk
FILE_FAILED = -32001  # the JSON-RPC error code of a file request that failed


class FileFailure(Exception):
    # A file request that cannot be done: `kind` an errno name the daemon
    # turns into the words users see, `data` what they need (at, target, size).

    def __init__(self, kind, message, **data):
        Exception.__init__(self, message)
        self.kind, self.data = kind, data


def file_params(params, names):
    p = params if isinstance(params, dict) else {}
    path = p.get('path')
    if not isinstance(path, str) or not path or '\0' in path:
        raise FileFailure('EINVAL', 'invalid params: want path, a string')
    values = []
    for name in names:
        v = p.get(name, 0)
        if type(v) is not int or v < 0:
            raise FileFailure('EINVAL', 'invalid params: want %s, an integer >= 0' % name)
        values.append(v)
    return path, values


def file_parts(path):
    # The components of `path` (relative to WORKSPACE, or absolute under it).
    if path == WORKSPACE or path.startswith(WORKSPACE + '/'):
        path = path[len(WORKSPACE):]
    elif path.startswith('/'):
        raise FileFailure('EINVAL', '%s is outside %s' % (path, WORKSPACE))
    parts = [p for p in path.split('/') if p not in ('', '.')]
    if '..' in parts:
        raise FileFailure('EINVAL', 'a path with ".." is refused')
    return parts


def file_oserror(e, at):
    import errno
    kinds = {errno.ENOENT: 'ENOENT', errno.EISDIR: 'EISDIR', errno.ENOTDIR: 'ENOTDIR',
             errno.ENOSPC: 'ENOSPC', errno.EDQUOT: 'ENOSPC', errno.EFBIG: 'EFBIG',
             errno.ELOOP: 'ELOOP'}
    return FileFailure(kinds.get(e.errno, 'EIO'), e.strerror or str(e), at=at)


def file_walk(path, create):
    # Walks to the last component of `path`: (fd of its directory, its
    # name, its real path, its lstat or None when missing).  With `create`,
    # missing directories on the way are made (0755).  The caller closes the fd.
    import posixpath
    import stat
    todo, done, hops = file_parts(path), [], 0
    if not todo:
        raise FileFailure('EISDIR', '%s is a directory' % WORKSPACE, at=WORKSPACE)
    fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            name = todo.pop(0)
            at = '/'.join([WORKSPACE] + done + [name])
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            except OSError as e:
                raise file_oserror(e, at)
            if st is not None and stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(name, dir_fd=fd)
                except OSError as e:
                    raise file_oserror(e, at)
                full = posixpath.normpath(posixpath.join('/'.join([WORKSPACE] + done), target))
                if full.startswith('//'):
                    full = full[1:]
                if full != WORKSPACE and not full.startswith(WORKSPACE + '/'):
                    raise FileFailure('EPERM', 'a symbolic link out of %s' % WORKSPACE,
                                      at=at, target=full)
                hops += 1
                if hops > FILE_HOPS:
                    raise FileFailure('ELOOP', 'too many symbolic links', at=at)
                todo = [p for p in full[len(WORKSPACE):].split('/') if p] + todo
                if not todo:
                    raise FileFailure('EISDIR', '%s is a directory' % WORKSPACE, at=WORKSPACE)
                os.close(fd)
                fd, done = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY), []
                continue
            if not todo:
                return fd, name, at, st
            if st is None:
                if not create:
                    raise FileFailure('ENOENT', 'no such file or directory', at=at)
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    todo.insert(0, name)  # made meanwhile: look again
                    continue
                except OSError as e:
                    raise file_oserror(e, at)
            elif not stat.S_ISDIR(st.st_mode):
                raise FileFailure('ENOTDIR', 'not a directory', at=at)
            try:
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise file_oserror(e, at)
            os.close(fd)
            fd = nfd
            done.append(name)
    except BaseException:
        os.close(fd)
        raise


def file_open(path, write, offset):
    # The file `path` opened (a regular file; made when writing at offset
    # 0, and emptied then): (fd, its real path, its fstat).
    import stat
    dfd, name, at, st = file_walk(path, write)
    try:
        if st is None and not write:
            raise FileFailure('ENOENT', 'no such file or directory', at=at)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise FileFailure('EISDIR', 'is a directory', at=at)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise FileFailure('EINVAL', 'not a regular file', at=at)
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        if write:
            flags |= os.O_WRONLY | (os.O_CREAT | os.O_TRUNC if offset == 0 else 0)
        else:
            flags |= os.O_RDONLY
        try:
            ffd = os.open(name, flags, 0o644, dir_fd=dfd)
        except OSError as e:
            raise file_oserror(e, at)
    finally:
        os.close(dfd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode):  # swapped meanwhile
        os.close(ffd)
        raise FileFailure('EINVAL', 'not a regular file', at=at)
    return ffd, at, st


def file_chunk(max_frame):
    """The bytes of one chunk under max_frame, as the daemon reckons it
    (files_chunk): a quarter of the frame, at most FILE_SLACK_MAX, for the
    rest of it, the chunk's base64 in what is left."""
    return (max_frame - min(FILE_SLACK_MAX, max_frame // 4)) // 4 * 3


def file_read(params, max_frame):
    # sandbox/file/read {path, offset, length, max}: up to `length` bytes
    # of the file from `offset` (fewer at its end; length is cut to what fits
    # a frame as base64) -> {path (real), size, data (base64)}.  EFBIG, with
    # the size, for a file over `max` bytes.
    path, (offset, length, most) = file_params(params, ('offset', 'length', 'max'))
    length = min(length, file_chunk(max_frame))
    fd, at, st = file_open(path, False, 0)
    try:
        if st.st_size > most:
            raise FileFailure('EFBIG', 'over the limit', at=at, size=st.st_size)
        # asked for no more than the file holds (and a byte, to see it end)
        length = min(length, max(st.st_size - offset, 0) + 1)
        data, got = [], 0
        while got < length:
            try:
                chunk = os.pread(fd, length - got, offset + got)
            except OSError as e:
                raise file_oserror(e, at)
            if not chunk:
                break
            data.append(chunk)
            got += len(chunk)
        data = data[0] if len(data) == 1 else b''.join(data)
    finally:
        os.close(fd)
    return {'path': at, 'size': st.st_size, 'data': FileData(data)}


class FileData(bytes):
    # Base64 bytes that file_answer puts in a frame as they are: a JSON
    # string needs no escape for them, and a file's megabytes are not passed
    # through json.dumps and encoded again.

    def __new__(cls, raw):
        return bytes.__new__(cls, binascii.b2a_base64(raw, newline=False))


def file_answer(rid, result):
    # The frame (bytes, newline ended) answering file request `rid`.
    data = result.pop('data', None)
    if data is None:
        return encode({'jsonrpc': '2.0', 'id': rid, 'result': result})
    head = encode({'jsonrpc': '2.0', 'id': rid, 'result': dict(result, data='')})
    tail = b'""}}\n'  # 'data' is the result's last key: its empty string, then the ends
    if not head.endswith(tail):
        raise ValueError('unexpected frame layout')
    return b''.join((head[:-len(tail) + 1], data, tail[1:]))


def file_write(params):
    # sandbox/file/write {path, offset, data (base64)}: writes a chunk of a
    # file; the chunk at offset 0 makes the file (and the directories missing
    # on its way) or empties it, each next one must start where the file ends
    # -> {path (real), size}.
    path, (offset,) = file_params(params, ('offset',))
    data = params.get('data', '')
    raw = None
    if isinstance(data, str):
        try:
            raw = binascii.a2b_base64(data.encode('ascii'))
        except (binascii.Error, UnicodeError):
            raw = None
        # a2b_base64 skips what is not base64: only the canonical form is taken
        if raw is not None and binascii.b2a_base64(raw, newline=False) != data.encode('ascii'):
            raw = None
    if raw is None:
        raise FileFailure('EINVAL', 'invalid params: want data, base64')
    fd, at, st = file_open(path, True, offset)
    try:
        if st.st_size != offset:
            raise FileFailure('EIO', 'it changed while it was written (%d bytes, not %d)'
                              % (st.st_size, offset), at=at)
        view = memoryview(raw)
        while view:
            try:
                n = os.pwrite(fd, view, offset)
            except OSError as e:
                raise file_oserror(e, at)
            view, offset = view[n:], offset + n
    finally:
        os.close(fd)
    return {'path': at, 'size': offset}
