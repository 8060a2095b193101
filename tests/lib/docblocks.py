#!/usr/bin/python3
"""Extract the command blocks of a Markdown page (README.md,
examples/results/README.md) or of a man page's EXAMPLES, for tests/docs.bats,
which runs them so that the documentation cannot drift.

usage: docblocks.py readme|man FILE OUTDIR

Writes OUTDIR/NNN.sh, one bash script per runnable block, and prints one
manifest line per block, tab-separated:
    run   FILE  LINE  SCRIPT     a block to run (LINE: its first line)
    skip  FILE  LINE  REASON     a block marked as not run, and why
    error FILE  LINE  MESSAGE    a block that can be neither run nor skipped

Markdown (kind readme): every fenced block with the info string sh, bash
or shell is a shell script (no prompts) and runs; ```text (or any other
language) is not a command. A block that must not run is preceded by the line
    <!-- not run: REASON -->
An indented code block, or a fence without a language, is an error: the
test cannot tell whether it is meant to run.

Man pages: every .Bd -literal block and .Dl line in the EXAMPLES section.
The text is taken from mandoc's rendering, as the reader sees it. A line
starting with "$ " is a command (with the lines that continue it, as bash
parses them); other lines are its output, which the test compares with what
the command prints (as a set of lines, since ranks print concurrently). A block without
any "$ " prompt is all commands. A command for another host ("host1$ ")
needs the block marked. A block that must not run is preceded by the roff
comment
    .\\" not run: REASON
on the line just before its .Bd or .Dl.

In each script, source line L of the block is script line L - LINE + 5, so
the test can name the line a failing command came from.
"""
import os
import re
import shlex
import subprocess
import sys

HEADER = 4          # script lines before the block's first line
RUN_LANGS = ("sh", "bash", "shell")
MARK_MD = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")
MARK_ROFF = re.compile(r'^\.\\"\s*not run:\s*(.*?)\s*$')
HOST_PROMPT = re.compile(r"^[A-Za-z0-9_.@-]+\$ ")


def script(path, where, body):
    """Write a block's script: body[k] is the block's line LINE+k."""
    with open(path, "w") as f:
        f.write("#!/bin/bash\n")
        f.write("# %s\n" % where)
        # The shell's state (exports, directory) carries from block to
        # block of one file, as in a reader's terminal.
        f.write('[ -f "$DOCS_ENV" ] && . "$DOCS_ENV"; set -eo pipefail; '
                'docs_expect() { diff <(sed "s/[[:space:]]*$//" "$DOCS_OUT" | '
                'sort) <(sort "$1") >&2 || { echo "the output differs from '
                'the page (< got, > page)" >&2; return 1; }; }\n')
        f.write("trap 'echo $LINENO >\"$DOCS_LINE\"' DEBUG\n")
        for line in body:
            f.write(line + "\n")
        # A job still running would outlive the block (and the test).
        f.write("trap - DEBUG\n")
        f.write('{ export -p; echo "cd $(printf %q "$PWD")"; } >"$DOCS_ENV"\n')
        f.write('left=$(jobs -pr)\n')
        f.write('if [ -n "$left" ]; then\n')
        f.write('\techo "a background job is still running at the end of '
                'the block" >&2\n')
        f.write('\tkill $left 2>/dev/null\n\texit 97\nfi\n')


class Out:
    def __init__(self, outdir):
        self.outdir = outdir
        self.n = 0

    def expected(self, k, rows):
        """A file holding the output a page shows for its command k."""
        path = os.path.join(self.outdir, "%03d.out%d" % (self.n + 1, k))
        with open(path, "w") as f:
            f.write("".join(r + "\n" for r in rows))
        return os.path.abspath(path)

    def run(self, fname, line, body):
        self.n += 1
        path = os.path.join(self.outdir, "%03d.sh" % self.n)
        script(path, "%s:%d" % (fname, line), body)
        print("run\t%s\t%d\t%s" % (fname, line, path))

    @staticmethod
    def skip(fname, line, reason):
        print("skip\t%s\t%d\t%s" % (fname, line, reason or "(no reason)"))

    @staticmethod
    def error(fname, line, msg):
        print("error\t%s\t%d\t%s" % (fname, line, msg))


def readme(fname, out):
    lines = open(fname).read().split("\n")
    i, mark, prev_blank = 0, None, True
    while i < len(lines):
        s = lines[i]
        m = MARK_MD.match(s)
        if m:
            mark = (i + 1, m.group(1))
            i += 1
            continue
        if s.startswith("```"):
            lang = s[3:].strip().split()[0] if s[3:].strip() else ""
            start = i + 1
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            if not lang:
                out.error(fname, start, "a fence without a language: "
                          "```sh runs, ```text does not")
            elif mark:
                out.skip(fname, start + 1, mark[1])
            elif lang in RUN_LANGS:
                out.run(fname, start + 1, body)
            mark = None
            i = j + 1
            prev_blank = False
            continue
        if (s.startswith("    ") or s.startswith("\t")) and prev_blank \
                and s.strip():
            out.error(fname, i + 1, "an indented code block: fence it "
                      "(```sh runs, ```text does not)")
            while i < len(lines) and (lines[i].startswith("    ") or
                                      lines[i].startswith("\t") or
                                      not lines[i].strip()):
                i += 1
            continue
        if s.strip() and mark:
            out.error(fname, mark[0], "a not-run marker not followed "
                      "by a fenced block")
            mark = None
        prev_blank = not s.strip()
        i += 1
    if mark:
        out.error(fname, mark[0], "a not-run marker not followed by a block")


def render(src_lines):
    """The text mandoc renders for a literal block, line by line."""
    doc = (".Dd January 1, 2000\n.Dt X 1\n.Os\n.Sh EXAMPLES\n"
           "DOCSBEGIN\n" + "\n".join(src_lines) + "\n.Pp\nDOCSEND\n")
    r = subprocess.run(["mandoc", "-Tascii", "-Owidth=1000"],
                       input=doc.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, check=True)
    # Undo the backspace overstriking of bold and underline.
    text = re.sub(r".\x08", "", r.stdout.decode())
    rows = text.split("\n")
    a = next(k for k, r in enumerate(rows) if r.strip() == "DOCSBEGIN")
    b = next(k for k, r in enumerate(rows) if r.strip() == "DOCSEND")
    rows = rows[a + 1:b]
    while rows and not rows[0].strip():
        rows.pop(0)
    while rows and not rows[-1].strip():
        rows.pop()
    ind = min((len(r) - len(r.lstrip()) for r in rows if r.strip()),
              default=0)
    return [r[ind:].rstrip() for r in rows]


def incomplete(text):
    """Whether bash reads text as an unfinished command."""
    if text.rstrip("\n").endswith("\\"):
        return True
    r = subprocess.run(["bash", "-n"], input=text.encode(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return r.returncode != 0 and (b"unexpected end of file" in r.stderr or
                                  b"unexpected EOF" in r.stderr)


def commands(fname, line, rows, out):
    """The block's script body: commands in place, output lines blanked."""
    for k, r in enumerate(rows):
        if HOST_PROMPT.match(r):
            out.error(fname, line + k, "a command for another host (%s): "
                      'mark the block with .\\" not run: REASON'
                      % r.split("$")[0])
            return None
    if not any(r.startswith("$ ") for r in rows):
        return rows
    body, k = [], 0
    while k < len(rows):
        r = rows[k]
        if not r.startswith("$ "):
            body.append("")         # output shown on the page
            k += 1
            continue
        cmd = [r[2:]]
        k += 1
        while k < len(rows) and incomplete("\n".join(cmd) + "\n"):
            cmd.append(rows[k])
            k += 1
        shown = []
        while k + len(shown) < len(rows) and \
                not rows[k + len(shown)].startswith("$ "):
            shown.append(rows[k + len(shown)])
        while shown and not shown[-1].strip():
            shown.pop()
        # The output the page shows must be what the command prints (in
        # any order of lines: ranks print concurrently). The command is
        # grouped on its own lines, so the line numbers stay.
        if shown and "#" not in cmd[-1] and not cmd[-1].rstrip().endswith("&"):
            exp = out.expected(len(body), shown)
            cmd[0] = "{ " + cmd[0]
            cmd[-1] += ' ; } >"$DOCS_OUT"; docs_expect %s' % shlex.quote(exp)
        body.extend(cmd)
    return body


def man(fname, out):
    lines = open(fname).read().split("\n")
    try:
        a = lines.index(".Sh EXAMPLES")
    except ValueError:
        out.error(fname, 0, "no EXAMPLES section")
        return
    b = next((k for k in range(a + 1, len(lines))
              if lines[k].startswith(".Sh ")), len(lines))
    k, mark = a + 1, None
    while k < b:
        s = lines[k]
        m = MARK_ROFF.match(s)
        if m:
            mark = (k + 1, m.group(1))
            k += 1
            continue
        if s.startswith(".Bd") or s.startswith(".Dl"):
            if s.startswith(".Bd"):
                if "-literal" not in s.split() and "-unfilled" not in s.split():
                    k += 1
                    mark = None
                    continue
                e = k + 1
                while e < b and not lines[e].startswith(".Ed"):
                    e += 1
                src, first, nxt = lines[k:e + 1], k + 2, e + 1
            else:
                src, first, nxt = [s], k + 1, k + 1
            if mark:
                out.skip(fname, first, mark[1])
            else:
                rows = render(src)
                if s.startswith(".Bd") and len(rows) != e - k - 1:
                    out.error(fname, first, "a literal block with macro "
                              "lines or blank lines cannot be run as written")
                else:
                    body = commands(fname, first, rows, out)
                    if body is not None:
                        out.run(fname, first, body)
            mark = None
            k = nxt
            continue
        if mark:
            out.error(fname, mark[0], "a not-run marker not just before "
                      "a .Bd or .Dl")
            mark = None
        k += 1


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("readme", "man"):
        sys.exit("usage: docblocks.py readme|man FILE OUTDIR")
    out = Out(sys.argv[3])
    os.makedirs(sys.argv[3], exist_ok=True)
    (readme if sys.argv[1] == "readme" else man)(sys.argv[2], out)


if __name__ == "__main__":
    main()
