"""The docs' two checks: every link resolves, and every figure is the tools'.

    docs_check.py links FILE.md...
    docs_check.py figures --tool NAME=PATH... FILE.md...

links: every relative link [text](path#anchor) of each file names a file or
folder that exists (relative to the file) and, with an anchor, a heading of
that Markdown file (GitHub's slugs). README.md stays the front door: at most
250 lines. No doc points outside the repository.

figures: a fenced block right after the marker

    <!-- figures -->              (or <!-- figures: exit=1 -->)

holds one or more commands, each a line starting with "$ " (a trailing "\\"
continues it on the next line), and after each the lines its output must
contain: in order in its standard output, or anywhere in its standard
error; each line must be part of one output line, whole words of it (runs
of blanks count as one), so a block may show a line's head, or a table's
rows alone, but not half a number; a line
"..." marks elided output and is skipped. The command runs under bash (pipes
to jq, head and grep allowed) from the repository root with the Bazel-built
tools first on PATH, and must exit with the marker's status (0 by default).

A fenced block whose first line starts with "$ " must carry a marker: either
figures, or <!-- recorded --> for a run too long for the test, whose figures
the doc labels as a recorded run beside it.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^\s*<!--\s*(figures|recorded)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^( *)(```+|~~~+)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
README_MAX_LINES = 250
# A relative path that starts by going up: checked against the tree's root.
UPWARD = re.compile(r"(?<![\w./-])(?:\.\./)+[\w.-]+")


def fail(msg):
    print("FAIL: " + msg)
    return 1


# ---- links ----

def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped but
    hyphens and underscores, each space a hyphen."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def closes(line, fence):
    """Whether line closes a block opened by fence (its characters alone,
    at least as many)."""
    t = line.strip()
    return len(t) >= len(fence) and set(t) == {fence[0]}


def outside_fences(lines):
    """(index, line) of the lines outside fenced blocks: a fence closes
    only on a fence of its own kind at least as long."""
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(2)
        elif fence is not None and closes(line, fence):
            fence = None
        elif fence is None:
            yield i, line


def anchors(path):
    seen = {}
    out = set()
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for _, line in outside_fences(lines):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else "%s-%d" % (base, n))
    return out



def prose_lines(path):
    """(line number, text) of the lines outside fenced blocks, inline code
    spans removed."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in outside_fences(lines):
        yield i + 1, re.sub(r"`[^`]*`", "``", line)


def check_links(files):
    failures = 0
    checked = 0
    for path in files:
        here = os.path.dirname(path)
        for number, line in prose_lines(path):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                checked += 1
                where = "%s:%d: link %s" % (path, number, target)
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
                if file_part and (dest.startswith("..") or os.path.isabs(file_part)):
                    failures += fail(where + " points outside the repository")
                    continue
                if not os.path.exists(dest):
                    failures += fail(where + ": no such file " + dest)
                    continue
                if anchor:
                    if not dest.endswith(".md"):
                        failures += fail(where + ": an anchor into a file that is not Markdown")
                    elif anchor not in anchors(dest):
                        failures += fail(where + ": %s has no heading #%s" % (dest, anchor))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for up in UPWARD.findall(text):
            # Any relative path, link or not, that climbs: it must land on
            # something in the tree.
            dest = os.path.normpath(os.path.join(here, up))
            if dest.startswith("..") or not os.path.exists(dest):
                failures += fail("%s names %s, which is not in the repository" % (path, up))
        if os.path.basename(path) == "README.md" and os.path.dirname(path) in ("", "."):
            n = text.count("\n")
            if n > README_MAX_LINES:
                failures += fail("README.md has %d lines, more than %d" % (n, README_MAX_LINES))
    print("%d links checked in %d files, %d failures" % (checked, len(files), failures))
    return failures


# ---- figures ----

def blocks(path):
    """Every marked fenced block: (kind, options, first line number, lines),
    and every unmarked block that shows a command, as kind None."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    marker = None
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            marker = (m.group(1), m.group(2) or "", i + 1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if fence:
            indent, ticks = fence.group(1), fence.group(2)
            start = i
            body = []
            i += 1
            while i < len(lines) and not closes(lines[i], ticks):
                line = lines[i]
                body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
                i += 1
            if marker is not None:
                yield marker[0], marker[1], start + 2, body
            elif body and body[0].startswith("$ "):
                yield None, "", start + 2, body
            marker = None
        elif lines[i].strip():
            marker = None
        i += 1


def commands(body):
    """(command, expected lines) of a figures block."""
    out = []
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            if out:
                if line.strip() and line.strip() != "...":
                    out[-1][1].append(line)
            elif line.strip():
                raise ValueError("output before the first command: " + line)
            i += 1
            continue
        cmd = line[2:]
        while cmd.endswith("\\") and i + 1 < len(body):
            i += 1
            cmd = cmd[:-1] + " " + body[i].strip()
        out.append((cmd, []))
        i += 1
    return out


def squash(s):
    """The line's words, one blank between each and one either side, so
    that a part found in it starts and ends at a word's edge."""
    return " " + " ".join(s.split()) + " "


def compare(expected, stdout, stderr):
    """The first expected line not found, or None."""
    out = [squash(l) for l in stdout.split("\n")]
    err = [squash(l) for l in stderr.split("\n")]
    at = 0
    for want in expected:
        w = squash(want)
        for j in range(at, len(out)):
            if w in out[j]:
                at = j + 1
                break
        else:
            if not any(w in e for e in err):
                return want
    return None


def check_figures(files, tools):
    bindir = tempfile.mkdtemp(prefix="docs-figures-bin.")
    for name, path in tools.items():
        os.symlink(os.path.abspath(path), os.path.join(bindir, name))
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    failures = 0
    ran = 0
    started = time.time()
    for path in files:
        for kind, options, number, body in blocks(path):
            where = "%s:%d" % (path, number)
            if kind is None:
                failures += fail(where + ": a command block without <!-- figures --> or "
                                 "<!-- recorded -->")
                continue
            if kind == "recorded":
                continue
            opts = dict(o.split("=", 1) for o in shlex.split(options))
            want_exit = int(opts.get("exit", "0"))
            timeout = float(opts.get("timeout", "120"))
            try:
                cmds = commands(body)
            except ValueError as e:
                failures += fail("%s: %s" % (where, e))
                continue
            if not cmds:
                failures += fail(where + ": a figures block without a command")
            for cmd, expected in cmds:
                t0 = time.time()
                try:
                    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       timeout=timeout)
                    rc, so, se = p.returncode, p.stdout.decode(errors="replace"), \
                        p.stderr.decode(errors="replace")
                except subprocess.TimeoutExpired:
                    failures += fail("%s: $ %s: still running after %.0f s" % (where, cmd, timeout))
                    continue
                ran += 1
                took = time.time() - t0
                print("%6.2f s  %s  $ %s" % (took, where, cmd))
                missing = compare(expected, so, se)
                if rc != want_exit or missing is not None:
                    why = ("exit %d, the doc says %d" % (rc, want_exit) if rc != want_exit
                           else "no output line holds: " + missing)
                    failures += fail("%s: $ %s: %s\n--- stdout\n%s--- stderr\n%s---" %
                                     (where, cmd, why, so, se))
    print("%d commands run in %.1f s, %d failures" % (ran, time.time() - started, failures))
    return failures


def main(argv):
    if len(argv) < 2 or argv[1] not in ("links", "figures"):
        print(__doc__)
        return 2
    tools = {}
    files = []
    args = argv[2:]
    while args:
        a = args.pop(0)
        if a == "--tool":
            name, _, path = args.pop(0).partition("=")
            tools[name] = path
        else:
            files.append(a)
    if argv[1] == "links":
        return 1 if check_links(files) else 0
    return 1 if check_figures(files, tools) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
