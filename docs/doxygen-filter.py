#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# docs/doxygen-filter.py - Doxygen's INPUT_FILTER for ulp's headers (docs/Doxyfile).
#
# The headers are commented in the kernel's style, with plain // comments, and stay that
# way: this filter turns those comments into Doxygen comments as Doxygen reads a header,
# leaving the file itself alone. It prints the header to stdout with, and only with:
#
#   - the file's opening block (SPDX line, "dir/file.h - what it is", the rest) as the
#     file's documentation: "/// @file" in place of the SPDX line, "///" for the others;
#   - a block of // lines just before a declaration (no blank line between) as "///";
#   - a trailing "// ..." after a member, enumerator or parameter line as "///< ...", and
#     the // lines under it that continue it in the same column as "///< ..." too.
#
# Only comments at declaration scope are touched (file, namespace, class, struct, union,
# enum): a comment inside a function body, or in an initialiser, stays a plain comment, since
# Doxygen would otherwise append it to the function's description. Every line keeps its
# number, so Doxygen's warnings point at the real header lines. In the converted text, the
# characters Doxygen would take for commands or HTML (\ @ < > & #) are escaped, outside
# `code spans`.
#
# Usage (what Doxygen runs): doxygen-filter.py HEADER
import re
import sys

DECL_SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b")
COMMENT_ONLY = re.compile(r"^(\s*)//(?!/)(.*)$")
SPECIAL = re.compile(r"([\\@<>&#])")


def escape(text):
    """Escape Doxygen's command and HTML characters outside `code spans`."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts lie outside backticks
        parts[i] = SPECIAL.sub(r"\\\1", parts[i])
    return "`".join(parts)


def code_and_comment(line):
    """Split a line into (code, column of a trailing //, comment text), skipping string
    and character literals and /* */ comments on the line. The column is None when the
    line has no // comment."""
    i, n = 0, len(line)
    code = []
    while i < n:
        c = line[i]
        if c in "\"'":
            q = c
            code.append(c)
            i += 1
            while i < n and line[i] != q:
                if line[i] == "\\" and i + 1 < n:
                    code.append(line[i])
                    i += 1
                code.append(line[i])
                i += 1
            if i < n:
                code.append(line[i])
                i += 1
            continue
        if line.startswith("/*", i):
            end = line.find("*/", i + 2)
            i = n if end < 0 else end + 2
            code.append(" ")
            continue
        if line.startswith("//", i):
            return "".join(code), i, line[i + 2 :]
        code.append(c)
        i += 1
    return "".join(code), None, ""


class Scopes:
    """A stack of brace scopes, each a declaration scope (namespace, class, ...) or not
    (a function body, an initialiser, a lambda)."""

    def __init__(self):
        self.stack = []
        self.pending = ""  # code since the last ; { or }: what a { would open

    def at_decl_scope(self):
        return all(self.stack)

    def feed(self, code):
        for c in code:
            if c == "{":
                # alignas(64) and attributes are no parameter list.
                head = re.sub(r"alignas\s*\([^)]*\)|\[\[[^\]]*\]\]", " ", self.pending)
                decl = bool(DECL_SCOPE.search(head)) and "(" not in head and "=" not in head
                self.stack.append(decl)
                self.pending = ""
            elif c == "}":
                if self.stack:
                    self.stack.pop()
                self.pending = ""
            elif c == ";":
                self.pending = ""
            else:
                self.pending += c
        self.pending += " "


def is_declaration(code):
    """Whether a line of code can start something a leading comment documents."""
    s = code.strip()
    if not s or s.startswith("#") or s.startswith("}"):
        return False
    if re.match(r"^(public|private|protected)\s*:", s):
        return False
    return True


def filter_lines(lines):
    out = list(lines)
    scopes = Scopes()
    block = []  # indices of the comment-only lines just before this one
    trail_col = None  # column of the trailing comment a following line may continue

    # The file's opening comment block: the file's own documentation.
    i = 0
    if lines and lines[0].startswith("// SPDX-License-Identifier"):
        out[0] = "/// @file\n"
        i = 1
        while i < len(lines) and COMMENT_ONLY.match(lines[i]):
            m = COMMENT_ONLY.match(lines[i])
            out[i] = m.group(1) + "///" + escape(m.group(2)) + "\n"
            i += 1

    for k in range(i, len(lines)):
        line = lines[k].rstrip("\n")
        m = COMMENT_ONLY.match(line)
        if m:
            col = len(m.group(1).expandtabs(8))
            if trail_col is not None and col == trail_col and scopes.at_decl_scope():
                # The continuation of the trailing comment on the line(s) above.
                out[k] = m.group(1) + "///<" + escape(m.group(2)) + "\n"
                continue
            trail_col = None
            block.append(k)
            continue
        code, at, text = code_and_comment(line)
        decl_scope = scopes.at_decl_scope()
        if block and decl_scope and is_declaration(code):
            for b in block:
                bm = COMMENT_ONLY.match(lines[b].rstrip("\n"))
                out[b] = bm.group(1) + "///" + escape(bm.group(2)) + "\n"
        block = []
        trail_col = None
        if at is not None and code.strip() and decl_scope:
            s = code.strip()
            if not s.startswith("#") and not s.startswith("}") and not text.startswith("/"):
                out[k] = line[:at] + "///<" + escape(text) + "\n"
                trail_col = len(line[:at].expandtabs(8))
        scopes.feed(code)
    return out


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: doxygen-filter.py HEADER\n")
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.readlines()
    sys.stdout.write("".join(filter_lines(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
