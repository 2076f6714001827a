#!/usr/bin/env python3
"""Embed a text file in the daemon as a C string (build step): the sandbox
runtime, the default policy.  Usage: embed.py INPUT OUTPUT [SYMBOL]."""
import sys

src = open(sys.argv[1], encoding="utf-8").read()
symbol = sys.argv[3] if len(sys.argv) > 3 else "corral_runtime_src"
if "\0" in src:
    sys.exit("%s must not contain NUL" % sys.argv[1])
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("/* Generated from %s; do not edit. */\n" % sys.argv[1].rsplit("/", 1)[-1])
    out.write("const char %s[] =\n" % symbol)
    for line in src.splitlines(keepends=True):
        esc = "".join(
            c if 32 <= ord(c) < 127 and c not in '"\\?' else "\\%03o" % ord(c)
            for c in line.encode("utf-8").decode("latin-1")
        )
        out.write('    "%s"\n' % esc)
    out.write(";\n")
