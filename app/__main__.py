"""`python -m app [--host H] [--port P]`: serve app.main through `laneway serve` (make run)."""

import sys

from laneway.cli import main

raise SystemExit(main(["serve", "--app", "app.main:build", *sys.argv[1:]]))
