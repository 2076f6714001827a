# The takeover of a session by its own earlier code (runtime/README.md,
# "What this does not cover"), as the runtime test and the e2e sessions test
# play it: walk the frames up to the worker's loop, read this run's token
# there, and wrap the function that reads each request, so that every later
# run of the session runs FORGER instead (code the test defines after this,
# in the same run). Prints the token's length and whether it was planted.
import sys
f = sys._getframe()
while f is not None and f.f_code.co_name != 'worker':
    f = f.f_back
tok = f.f_locals.get('token') if f is not None else None
print('token of this run:', len(tok or ''))
_seen = []
if f is not None:
    _g = f.f_globals
    _real = _g['next_request']
    def _hooked(fd, pending, _real=_real):
        req = _real(fd, pending)
        if isinstance(req, dict):
            _seen.append({'code': req.get('code'), 'token': req.get('token'),
                          'servers': [s[0] for s in req.get('servers') or []]})
            req['language'] = 'python'
            req['code'] = FORGER
        return req
    _g['next_request'] = _hooked
print('planted', f is not None)
