"""The `laneway` console script's entry point: `main` loads the command inside its own `try`,
so that Ctrl-C while Python loads Laneway's modules (a few tenths of a second) ends as it does
later, in one line, `laneway: interrupted`, and exit 130, not in a traceback.

A module of its own, outside the `laneway` package, because importing any module inside it
first runs `laneway/__init__.py`, which loads the authoring API (most of that time) before any
code of the command's could catch the interrupt. `python -m laneway` is laneway/__main__.py.
"""

import sys

# laneway/cli/client.py's EXIT_INTERRUPTED (128 + SIGINT), which cannot be imported before the
# interrupt it answers is caught.
_EXIT_INTERRUPTED = 130


def main() -> int:
    """Run `laneway` with the process's arguments; returns its exit code."""
    try:
        from laneway.cli import main as command
    except KeyboardInterrupt:
        print("laneway: interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED
    return command()
