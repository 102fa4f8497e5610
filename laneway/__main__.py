"""`python -m laneway`: the `laneway` command (laneway/cli.py)."""

from laneway.cli import main

raise SystemExit(main())
