# The worker's API: what user code sees as module `corral` (runtime/README.md, "Python API").
# Defined here so a pooled sandbox compiles it before `sandbox/ready`; the
# worker only builds the module object, and nothing runs until user code
# calls it (the reader thread starts on first use).  The classes name
# `corral` as their module: tracebacks say corral.ToolError, pickle finds them.

def check_servers(servers):
    """`servers` of sandbox/exec as [[name, alias], ...], or None if malformed."""
    if servers is None:
        return []
    if not isinstance(servers, list):
        return None
    out, names, aliases = [], set(), set()
    for s in servers:
        if not isinstance(s, dict):
            return None
        name, alias = s.get('name'), s.get('alias')
        if not isinstance(name, str) or not name or name in names \
                or not isinstance(alias, str) or not alias.isidentifier() or alias in aliases:
            return None
        names.add(name)
        aliases.add(alias)
        out.append([name, alias])
    return out


class McpError(Exception):
    """An MCP call failed.  .server and .tool say which; .code is the
    JSON-RPC error code (or None), .type the daemon's error type
    ("PolicyDenied", ...), .data the error's data."""
    __module__ = 'corral'

    def __init__(self, message='', server=None, tool=None, code=None, type=None, data=None):
        super().__init__(message)
        self.server, self.tool, self.code, self.type, self.data = server, tool, code, type, data


class ToolError(McpError):
    """The tool ran and reported an error (`isError`): the message is its
    text, .result the whole ToolResult."""
    __module__ = 'corral'

    def __init__(self, message='', result=None, **kw):
        super().__init__(message, **kw)
        self.result = result


class PolicyDenied(McpError):
    """The policy denies this server or tool, or the server is not one of this run's."""
    __module__ = 'corral'


class ServerUnavailable(McpError):
    """The MCP server cannot be started or died."""
    __module__ = 'corral'


class ToolTimeout(McpError, TimeoutError):
    """The call took longer than the policy allows (or than .result(timeout))."""
    __module__ = 'corral'


class TooLarge(McpError):
    """The arguments or the result are over the size limit."""
    __module__ = 'corral'


class TooManyCalls(McpError):
    """This run used up its call budget, or has too many calls in flight."""
    __module__ = 'corral'


class ToolNotFound(McpError):
    """The server has no such tool."""
    __module__ = 'corral'


class ProtocolError(McpError):
    """A malformed frame, or the channel to the daemon is gone."""
    __module__ = 'corral'


ERROR_TYPES = {'PolicyDenied': PolicyDenied, 'ServerUnavailable': ServerUnavailable,
               'Timeout': ToolTimeout, 'TooLarge': TooLarge, 'TooManyCalls': TooManyCalls,
               'ToolNotFound': ToolNotFound, 'ProtocolError': ProtocolError}
ERROR_CODES = {-32001: 'PolicyDenied', -32002: 'ServerUnavailable', -32003: 'Timeout',
               -32004: 'TooLarge', -32005: 'TooManyCalls', -32006: 'ToolNotFound',
               -32600: 'ProtocolError', -32700: 'ProtocolError'}


def mcp_error(err, server=None, tool=None):
    """The exception for a JSON-RPC error object: by data.type, or by code
    when data has no type."""
    if not isinstance(err, dict):
        err = {}
    code, data, message = err.get('code'), err.get('data'), err.get('message')
    kind = data.get('type') if isinstance(data, dict) else None
    if not isinstance(kind, str):
        kind = ERROR_CODES.get(code) if isinstance(code, int) else None
    return ERROR_TYPES.get(kind, McpError)(message if isinstance(message, str) else 'MCP call failed',
                                           server=server, tool=tool, code=code, type=kind, data=data)


class TextContent:
    __module__ = 'corral'
    __slots__ = ('text', 'raw')
    type = 'text'

    def __init__(self, text, raw=None):
        self.text, self.raw = text, raw

    def __str__(self):
        return self.text

    def __repr__(self):
        return 'TextContent(%r)' % (self.text if len(self.text) <= 60 else self.text[:57] + '...')


class BinaryContent:
    """Image or audio: .data the decoded bytes, .mime_type e.g. "image/png"."""
    __module__ = 'corral'
    __slots__ = ('data', 'mime_type', 'raw')

    def __init__(self, data, mime_type, raw=None):
        self.data, self.mime_type, self.raw = data, mime_type, raw

    def __repr__(self):
        return '%s(%d bytes, %r)' % (type(self).__name__, len(self.data), self.mime_type)


class ImageContent(BinaryContent):
    __module__ = 'corral'
    __slots__ = ()
    type = 'image'


class AudioContent(BinaryContent):
    __module__ = 'corral'
    __slots__ = ()
    type = 'audio'


def content_item(item):
    """A content item of a tool result as an object; unknown kinds (and
    undecodable data) stay the dict they were."""
    if not isinstance(item, dict):
        return item
    kind = item.get('type')
    if kind == 'text' and isinstance(item.get('text'), str):
        return TextContent(item['text'], item)
    if kind in ('image', 'audio') and isinstance(item.get('data'), str):
        import binascii  # built in, and already loaded
        try:
            data = binascii.a2b_base64(item['data'])
        except ValueError:  # binascii.Error, or a non-ASCII str
            return item
        mime = item.get('mimeType')
        return (ImageContent if kind == 'image' else AudioContent)(
            data, mime if isinstance(mime, str) else None, item)
    return item


class ToolResult:
    """A tool's result: .content (TextContent, ImageContent, AudioContent, or
    the item's dict for other kinds), .text (the text items joined with
    newlines), .images, .structured (structuredContent or None), .raw (the
    result as received), .is_error.  str() gives .text; `await` gives itself."""
    __module__ = 'corral'

    def __init__(self, raw, server=None, tool=None, is_error=False):
        content = raw.get('content')
        self.raw, self.server, self.tool, self.is_error = raw, server, tool, is_error
        self.content = [content_item(c) for c in content] if isinstance(content, list) else []
        self.structured = raw.get('structuredContent')

    @property
    def text(self):
        return '\n'.join(c.text for c in self.content if isinstance(c, TextContent))

    @property
    def images(self):
        return [c for c in self.content if isinstance(c, ImageContent)]

    def __str__(self):
        return self.text

    def __repr__(self):
        return '<ToolResult %s.%s: %d content items%s>' % (
            self.server, self.tool, len(self.content), ', error' if self.is_error else '')

    def __await__(self):  # so that `await` is always right
        yield from ()
        return self


class AwaitableList(list):
    """The discovery calls' lists: `await` gives the list itself."""
    __module__ = 'corral'

    def __await__(self):
        yield from ()
        return self


class AwaitableStr(str):
    """tool_docs()'s text: `await` gives the text itself."""
    __module__ = 'corral'

    def __await__(self):
        yield from ()
        return str(self)


def tool_result(msg, server, tool):
    if 'error' in msg:
        raise mcp_error(msg['error'], server, tool)
    raw = msg.get('result')
    if not isinstance(raw, dict):
        raise ProtocolError('malformed tools/call result', server=server, tool=tool, type='ProtocolError')
    if raw.get('isError') is True:
        result = ToolResult(raw, server, tool, True)
        raise ToolError(result.text or 'the tool reported an error', result=result,
                        server=server, tool=tool, type='ToolError')
    return ToolResult(raw, server, tool)


def wake(fut):
    if not fut.done():
        fut.set_result(None)


class Waiter:
    """One request in flight: the reader thread hands it the response."""
    __slots__ = ('ch', 'rid', 'server', 'tool', 'msg', 'event', 'futures')

    def __init__(self, ch, rid, server=None, tool=None):
        import threading
        self.ch, self.rid, self.server, self.tool = ch, rid, server, tool
        self.msg, self.event, self.futures = None, threading.Event(), []

    def finish(self, msg):
        with self.ch.lock:
            if self.msg is not None:
                return
            self.msg = msg
            futures, self.futures = self.futures, []
        self.event.set()
        for loop, fut in futures:
            try:
                loop.call_soon_threadsafe(wake, fut)
            except RuntimeError:  # that loop is closed
                pass

    def future(self, loop):
        """A future of `loop` done when the response is in; None if it is."""
        with self.ch.lock:
            if self.msg is not None:
                return None
            fut = loop.create_future()
            self.futures.append((loop, fut))
            return fut

    def wait(self, timeout=None):
        try:
            done = self.event.wait(timeout)
        except BaseException:  # KeyboardInterrupt: withdraw the call
            self.cancel()
            raise
        if not done:
            raise ToolTimeout('no response within %s s' % timeout, server=self.server, tool=self.tool,
                              type='Timeout')
        return self.msg

    def cancel(self):
        """Withdraws the call: the daemon is told, a late response dropped."""
        with self.ch.lock:
            if self.msg is not None:
                return False
            self.ch.pending.pop(self.rid, None)
        self.finish({'error': {'code': None, 'message': 'call cancelled', 'data': {'type': 'Cancelled'}}})
        try:
            self.ch.send(encode({'jsonrpc': '2.0', 'method': 'notifications/cancelled',
                                 'params': {'requestId': self.rid}}))
        except OSError:
            pass
        return True


class PendingCall:
    """A tool call made while an asyncio loop runs in this thread: the request
    is already sent.  `await` it, or call .result(timeout=None), for the
    ToolResult; any other attribute waits for the result and reads it there."""
    __module__ = 'corral'
    __slots__ = ('_waiter', '_outcome')

    def __init__(self, waiter):
        self._waiter, self._outcome = waiter, None

    def done(self):
        return self._waiter.event.is_set()

    def cancel(self):
        """Withdraws the call; False if it had completed already."""
        return self._waiter.cancel()

    def result(self, timeout=None):
        if self._outcome is None:
            w = self._waiter
            msg = w.wait(timeout)
            try:
                self._outcome = (True, tool_result(msg, w.server, w.tool))
            except McpError as e:
                self._outcome = (False, e)
        ok, value = self._outcome
        if ok:
            return value
        raise value.with_traceback(None)

    def __await__(self):
        w = self._waiter
        if not w.event.is_set():
            import asyncio
            fut = w.future(asyncio.get_running_loop())
            if fut is not None:
                try:
                    yield from fut.__await__()
                except BaseException:  # cancelled (asyncio.wait_for timed out...)
                    w.cancel()
                    raise
        return self.result()

    def __getattr__(self, name):
        if name.startswith('__'):  # copy, pickle, inspect: no blocking call
            raise AttributeError(name)
        return getattr(self.result(), name)

    def __str__(self):
        return str(self.result())

    def __repr__(self):
        w = self._waiter
        return '<PendingCall %s.%s %s>' % (w.server, w.tool, 'done' if self.done() else 'pending')


class Channel:
    """The worker's end of the API socket.  Requests are written whole under
    a lock; one reader thread, started on first use, routes responses by id."""

    def __init__(self, fd, max_frame, servers):
        import _thread
        self.fd, self.max_frame, self.servers = fd, max_frame, servers
        self.pid = os.getpid()
        self.lock = _thread.allocate_lock()   # pending, orphans, reader, closed
        self.wlock = _thread.allocate_lock()  # whole lines on the socket
        self.pending, self.orphans, self.next_id = {}, [], 0
        self.reader, self.closed = None, None
        self.tools = {}                       # tools/list per server, for this run
        self.skipped = set()                  # servers search_tools said it skipped

    def start(self):
        if os.getpid() != self.pid:  # a forked child would steal the parent's responses
            raise McpError('the MCP bridge is not available in a forked child process')
        with self.lock:
            if self.reader is None and self.closed is None:
                import threading
                self.reader = threading.Thread(target=self.read_loop, name='corral-reader', daemon=True)
                self.reader.start()

    def read_loop(self):
        reason = 'the channel to the corral supervisor closed'
        buf, scanned = bytearray(), 0
        try:
            while True:
                data = os.read(self.fd, 1 << 20)
                if not data:
                    break
                buf += data
                while True:
                    i = buf.find(b'\n', scanned)
                    if i < 0:
                        scanned = len(buf)
                        break
                    line = bytes(buf[:i])
                    del buf[:i + 1]
                    scanned = 0
                    self.dispatch(line)
        except BaseException as e:  # noqa: B036  never die silently with calls waiting
            reason = 'the channel to the corral supervisor failed: %s' % e
        self.close(reason)

    def dispatch(self, line):
        try:
            msg = json.loads(line.decode('utf-8'))
        except (ValueError, RecursionError):
            return
        if not isinstance(msg, dict):
            return
        rid = msg.get('id')
        with self.lock:
            if rid is None:  # the supervisor's answer to a malformed line
                self.orphans.append(msg)
                del self.orphans[:-64]
                return
            w = self.pending.pop(rid, None) if isinstance(rid, (str, int)) else None
        if w is not None:
            w.finish(msg)  # else a cancelled call's late response

    def close(self, reason):
        with self.lock:
            if self.closed is None:
                self.closed = reason
        self.fail_pending(reason)

    def fail_pending(self, reason):
        """Every call still waiting fails (a late response is dropped)."""
        with self.lock:
            pending, self.pending = self.pending, {}
        for w in pending.values():
            w.finish({'error': {'code': None, 'message': reason, 'data': {'type': 'ProtocolError'}}})

    def new_run(self, servers):
        """A session's next run: its own servers, nothing cached."""
        self.servers, self.tools, self.skipped = servers, {}, set()

    def send(self, data):
        with self.wlock:
            write_all(self.fd, data)

    def request(self, method, params, server=None, tool=None):
        """Sends a request; the Waiter that will get its response."""
        self.start()
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        line = encode({'jsonrpc': '2.0', 'id': rid, 'method': method, 'params': params})
        if len(line) > self.max_frame + 1:
            raise TooLarge('request of %d bytes, over the %d-byte frame limit' % (len(line) - 1, self.max_frame),
                           server=server, tool=tool, type='TooLarge')
        w = Waiter(self, rid, server, tool)
        with self.lock:
            if self.closed is not None:
                raise ProtocolError(self.closed, server=server, tool=tool, type='ProtocolError')
            self.pending[rid] = w
        try:
            self.send(line)
        except OSError as e:
            with self.lock:
                self.pending.pop(rid, None)
            raise ProtocolError('cannot reach the corral supervisor: %s' % e, server=server, tool=tool,
                                type='ProtocolError') from None
        return w

    def call(self, method, params, server=None):
        """A request answered before it returns: the result object."""
        msg = self.request(method, params, server).wait()
        if 'error' in msg:
            raise mcp_error(msg['error'], server)
        if not isinstance(msg.get('result'), dict):
            raise ProtocolError('malformed %s result' % method, server=server, type='ProtocolError')
        return msg['result']

    def server_name(self, server):
        """A server of this run by name, or by alias."""
        if not isinstance(server, str):
            raise TypeError('server must be a string, not %s' % type(server).__name__)
        for name, alias in self.servers:
            if server == name:
                return name
        for name, alias in self.servers:
            if server == alias:
                return name
        return server  # the daemon denies servers that are not this run's

    def alias(self, server):
        for name, alias in self.servers:
            if name == server:
                return alias
        return None

    def tool_list(self, server, msg=None):
        """tools/list of a server (cached for the run): the tool dicts with a name."""
        if server not in self.tools:
            if msg is None:
                result = self.call('tools/list', {'server': server}, server)
            elif 'error' in msg:
                raise mcp_error(msg['error'], server)
            else:
                result = msg.get('result')
            tools = result.get('tools') if isinstance(result, dict) else None
            if not isinstance(tools, list):
                raise ProtocolError('malformed tools/list result', server=server, type='ProtocolError')
            self.tools[server] = [t for t in tools if isinstance(t, dict) and isinstance(t.get('name'), str)]
        return self.tools[server]


api_channel = None  # the worker's Channel


def channel():
    if api_channel is None:
        raise McpError('the MCP bridge is only available in Python runs of corral')
    return api_channel


def running_loop():
    asyncio = sys.modules.get('asyncio')
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_tool(server, tool, arguments=None):
    """Calls `tool` of MCP server `server` (its name or alias) with
    `arguments`, a dict.  Without a running asyncio loop in this thread it
    waits and returns a ToolResult; with one it returns a PendingCall to
    await.  A tool reporting an error raises ToolError; other failures raise
    the McpError subclass of the daemon's error type."""
    ch = channel()
    server = ch.server_name(server)
    if not isinstance(tool, str):
        raise TypeError('tool must be a string, not %s' % type(tool).__name__)
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise TypeError('arguments must be a dict, not %s' % type(arguments).__name__)
    call = PendingCall(ch.request('tools/call', {'server': server, 'name': tool, 'arguments': arguments},
                                  server, tool))
    return call if running_loop() is not None else call.result()


def list_servers():
    """This run's MCP servers: dicts with name, alias, description, status,
    tools (a count or None) and error."""
    servers = channel().call('servers/list', {}).get('servers')
    if not isinstance(servers, list):
        raise ProtocolError('malformed servers/list result', type='ProtocolError')
    return AwaitableList(servers)


def list_tools(server):
    """The tools of `server`: dicts with name and description."""
    ch = channel()
    server = ch.server_name(server)
    return AwaitableList({'name': t['name'], 'description': text_of(t.get('description'))}
                         for t in ch.tool_list(server))


def text_of(value):
    return value if isinstance(value, str) else ''


def flat(s):
    return s.lower().replace('-', '').replace('_', '')


def search_tools(query, limit=20):
    """Tools of this run's servers whose name or description contains
    `query` (or all of its words), case-insensitive, best first: dicts with
    server, name and description.  A server that cannot be listed is skipped
    with a note on stderr."""
    if not isinstance(query, str):
        raise TypeError('query must be a string')
    ch = channel()
    names = [name for name, _ in ch.servers]
    # the servers not listed yet are asked all at once (the daemon may have to start them)
    asked = [(name, ch.request('tools/list', {'server': name}, name)) for name in names if name not in ch.tools]
    for name, w in asked:
        try:
            ch.tool_list(name, w.wait())
        except McpError as e:
            if name not in ch.skipped:  # asked again next time: it may come back
                ch.skipped.add(name)
                sys.stderr.write('corral: search_tools: skipped server %s: %s\n' % (name, e))
    q = query.lower().strip()
    terms = q.split()
    found = []
    for order, server in enumerate(names):
        for i, t in enumerate(ch.tools.get(server, ())):
            name, desc = t['name'], text_of(t.get('description'))
            score = match_score(q, terms, name.lower(), desc.lower())
            if score:  # ties: in the order of the servers and of their tools
                found.append((-score, order, i, server, name, desc))
    found.sort()
    if limit is not None:
        found = found[:max(0, limit)]
    return AwaitableList({'server': server, 'name': name, 'description': desc}
                         for _, _, _, server, name, desc in found)


def match_score(q, terms, name, desc):
    """0 for no match; more for a better one (the name counts most)."""
    if not q:
        return 1
    hay = name + '\n' + desc
    if q not in hay and flat(q) not in flat(name) and not all(t in hay for t in terms):
        return 0
    score = 100 if flat(q) == flat(name) else 40 if q in name or flat(q) in flat(name) else 0
    score += 10 if q in desc else 0
    for t in terms:
        score += 5 if t in name else 1 if t in desc else 0
    return score or 1


def find_tool(tools, tool, server):
    """As the daemon resolves names: exact, else the one tool equal after
    lowercasing and dropping '-' and '_'."""
    for t in tools:
        if t['name'] == tool:
            return t
    like = [t for t in tools if flat(t['name']) == flat(tool)]
    if len(like) == 1:
        return like[0]
    names = ', '.join(sorted(t['name'] for t in tools))
    raise ToolNotFound('no tool %r on server %r (tools: %s)' % (tool, server, names or 'none'),
                       server=server, tool=tool, type='ToolNotFound')


def schema_type(s, depth=0):
    """A JSON schema's type in a few words: "string", "array of integer", "a | b"."""
    if not isinstance(s, dict) or depth > 4:
        return 'any'
    if isinstance(s.get('enum'), list):
        return 'one of ' + ', '.join(json.dumps(v, ensure_ascii=False) for v in s['enum'][:20])
    if 'const' in s:
        return 'constant ' + json.dumps(s['const'], ensure_ascii=False)
    t = s.get('type')
    if isinstance(t, list):
        return ' | '.join(str(x) for x in t)
    if t == 'array' and isinstance(s.get('items'), dict):
        return 'array of ' + schema_type(s['items'], depth + 1)
    if isinstance(t, str):
        return t
    for key in ('anyOf', 'oneOf'):
        if isinstance(s.get(key), list):
            return ' | '.join(schema_type(x, depth + 1) for x in s[key])
    if isinstance(s.get('$ref'), str):
        return s['$ref'].rsplit('/', 1)[-1]
    return 'any'


def tool_docs(server, tool):
    """How to call `tool` of `server`: its description, parameters (type,
    required or not, description) and, at the end, its input schema as JSON."""
    import keyword
    ch = channel()
    server = ch.server_name(server)
    t = find_tool(ch.tool_list(server), tool, server)
    name = t['name']
    schema = t.get('inputSchema') if isinstance(t.get('inputSchema'), dict) else {}
    props = schema.get('properties') if isinstance(schema.get('properties'), dict) else {}
    required = schema.get('required') if isinstance(schema.get('required'), list) else []
    lines = ['%s (server %s)' % (name, server)]
    desc = text_of(t.get('description')).strip()
    if desc:
        lines += ['', desc]
    # how to call it: mcp_<alias>.<name> when both are identifiers
    # (the daemon finds get-sum for get_sum), else call_tool
    must = [p for p in props if p in required]
    attr = name.replace('-', '_')
    plain = all(p.isidentifier() and not keyword.iskeyword(p) for p in must)
    alias = ch.alias(server)
    if alias and attr.isidentifier() and not keyword.iskeyword(attr):
        args = ', '.join('%s=...' % p for p in must) if plain \
            else '{%s}' % ', '.join('%s: ...' % json.dumps(p) for p in must)
        lines += ['', 'Call: mcp_%s.%s(%s)' % (alias, attr, args)]
    else:
        lines += ['', 'Call: call_tool(%s, %s, {%s})' % (json.dumps(server), json.dumps(name),
                                                         ', '.join('%s: ...' % json.dumps(p) for p in must))]
    lines += ['', 'Parameters:' if props else 'Parameters: none']
    for p, s in props.items():
        s = s if isinstance(s, dict) else {}
        head = '  %s (%s%s' % (p, schema_type(s), ', required' if p in required else ', optional')
        if 'default' in s:
            head += ', default %s' % json.dumps(s['default'], ensure_ascii=False)
        head += ')'
        pdesc = text_of(s.get('description')).strip()
        lines.append(head + (': ' + pdesc.replace('\n', '\n    ') if pdesc else ''))
    lines += ['', 'Input schema:', json.dumps(schema, indent=2, ensure_ascii=False)]
    if isinstance(t.get('outputSchema'), dict):
        lines += ['', 'Output schema:', json.dumps(t['outputSchema'], indent=2, ensure_ascii=False)]
    return AwaitableStr('\n'.join(lines))


class McpTool:
    """`mcp_<alias>.<tool>`: call it with the tool's arguments as keywords
    (or one dict, for names that are not identifiers)."""
    __module__ = 'corral'
    __slots__ = ('server', 'name')

    def __init__(self, server, name):
        self.server, self.name = server, name

    def __call__(self, *args, **kwargs):
        if len(args) > 1 or (args and not isinstance(args[0], dict)):
            raise TypeError('%s takes keyword arguments, or one dict' % self.name)
        arguments = dict(args[0]) if args else {}
        arguments.update(kwargs)
        return call_tool(self.server, self.name, arguments)

    def __repr__(self):
        return '<MCP tool %s.%s>' % (self.server, self.name)


class McpServer:
    """`mcp_<alias>`: any attribute is a tool of that server, passed on by
    the name as written (the daemon also finds get-sum for get_sum)."""
    __module__ = 'corral'
    __slots__ = ('_corral_server', '_corral_alias')

    def __init__(self, name, alias):
        self._corral_server, self._corral_alias = name, alias

    def __getattr__(self, tool):
        if tool.startswith('__'):  # copy, pickle, inspect
            raise AttributeError(tool)
        return McpTool(self._corral_server, tool)

    def __repr__(self):
        return '<MCP server %s: mcp_%s.<tool>(**arguments)>' % (self._corral_server, self._corral_alias)


def _raw_send(line):
    """Tests: writes bytes to the channel as they are."""
    ch = channel()
    ch.start()
    ch.send(line.encode('utf-8') if isinstance(line, str) else bytes(line))


def _raw_request(obj, timeout=10.0):
    """Tests: sends obj (a dict, as one line; bytes or str as they are) and
    returns the response dict: the one with the id of obj (of bytes: of
    their last line that parses and has one), else the next one with id
    null (the supervisor's answer to a malformed line).  None after
    `timeout` seconds (notifications are never answered)."""
    ch = channel()
    ch.start()
    if isinstance(obj, (bytes, bytearray, str)):
        data = obj.encode('utf-8') if isinstance(obj, str) else bytes(obj)
        msgs = []
        for line in data.split(b'\n'):
            try:
                msgs.append(json.loads(line.decode('utf-8')))
            except (ValueError, RecursionError):
                pass
    else:
        data = json.dumps(obj).encode('utf-8') + b'\n'
        msgs = [obj]
    w = None
    for msg in msgs:
        rid = msg.get('id') if isinstance(msg, dict) else None
        if isinstance(rid, (str, int)) and not isinstance(rid, bool):
            w = Waiter(ch, rid)
    if w is not None:
        with ch.lock:
            ch.pending[w.rid] = w
    with ch.lock:
        del ch.orphans[:]
    ch.send(data)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if w is not None and w.event.is_set():
            return w.msg
        with ch.lock:
            if ch.orphans:
                return ch.orphans.pop(0)
        time.sleep(0.005)
    if w is not None:
        with ch.lock:
            ch.pending.pop(w.rid, None)
    return None


_progress_sent = [0.0]


def progress(done, total=None, message=None):
    """Report this run's progress to the MCP host (as notifications/progress,
    when the host asked for them with a progressToken; otherwise dropped).
    done and total are numbers (total optional), message a short text.
    Reports closer than 20 ms to the previous one are dropped, except one
    with done >= total.  Never raises for a lost report."""
    for v in (done, total):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or v != v or v in (float('inf'), float('-inf'))):
            raise TypeError('corral.progress(): done and total must be finite numbers')
    now = time.monotonic()
    final = total is not None and done >= total
    if not final and now - _progress_sent[0] < PROGRESS_INTERVAL:
        return
    _progress_sent[0] = now
    params = {'progress': done}
    if total is not None:
        params['total'] = total
    if message is not None:
        params['message'] = str(message)[:PROGRESS_MESSAGE_CAP]
    try:
        channel().send(encode({'jsonrpc': '2.0', 'method': 'corral/progress', 'params': params}))
    except (OSError, McpError, ValueError):
        pass


progress.__module__ = 'corral'
API_FUNCTIONS = (call_tool, list_servers, list_tools, search_tools, tool_docs)
API_CLASSES = (ToolResult, TextContent, ImageContent, AudioContent, BinaryContent, PendingCall,
               McpError, ToolError, PolicyDenied, ServerUnavailable, ToolTimeout, TooLarge,
               TooManyCalls, ToolNotFound, ProtocolError, AwaitableList, AwaitableStr, McpServer, McpTool)
for _f in API_FUNCTIONS + (_raw_send, _raw_request):
    _f.__module__ = 'corral'
del _f


def install_api(main, fd, max_frame, servers):
    """Module `corral` and the globals of the user's __main__: `corral`
    itself (so corral.progress() and `except corral.PolicyDenied` work
    without an import), the functions and mcp_<alias> per server.  Cheap:
    no thread, no import."""
    global api_channel
    import types
    if api_channel is not None and api_channel.fd == fd and api_channel.pid == os.getpid():
        api_channel.new_run(servers)  # a session: one reader thread per socket
    else:
        api_channel = Channel(fd, max_frame, servers)
    mod = types.ModuleType('corral', 'MCP tools of this corral run: call_tool(), mcp_<alias>.<tool>(), '
                           'list_servers(), list_tools(), search_tools(), tool_docs().')
    for obj in API_FUNCTIONS + API_CLASSES + (progress, _raw_send, _raw_request):
        setattr(mod, obj.__name__, obj)
    for name, alias in servers:
        setattr(mod, 'mcp_' + alias, McpServer(name, alias))
    sys.modules['corral'] = mod
    # A session's globals may still hold the proxies of an earlier run's
    # servers: those go, unless user code rebound the name.
    for key, obj in _api_globals.items():
        if main.get(key) is obj:
            del main[key]
    _api_globals.clear()
    _api_globals['corral'] = main['corral'] = mod
    for f in API_FUNCTIONS:
        _api_globals[f.__name__] = main[f.__name__] = f
    for name, alias in servers:
        _api_globals['mcp_' + alias] = main['mcp_' + alias] = getattr(mod, 'mcp_' + alias)


_api_globals = {}  # what install_api put in __main__, by name
