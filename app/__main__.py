"""`python -m app`: the `laneway` command (app/cli.py)."""

from app.cli import main

raise SystemExit(main())
