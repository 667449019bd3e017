"""The examples' command lines, parsed one way: a flag given twice is
refused (argparse would keep the last and drop the first in silence),
exit status 2 with the flag named, as every kvshard tool does."""

import sys


def parse_once(ap, argv=None):
    """ap.parse_args(argv), after refusing a flag given twice."""
    words = sys.argv[1:] if argv is None else argv
    given = [w.split("=")[0] for w in words if w.startswith("--")]
    twice = sorted({w for w in given if given.count(w) > 1})
    if twice:
        ap.error(f"{twice[0]} is given twice; give it once")
    return ap.parse_args(argv)


def unwritable(program, error):
    """The report could not be written (a full disk, a closed pipe): says
    so on stderr and returns exit status 1. What stdout still buffers is
    dropped, so the interpreter's own flush at exit cannot fail again
    (it would print a second error and exit 120)."""
    import os
    print(f"{program}: writing the report: {error.strerror}", file=sys.stderr)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 1
