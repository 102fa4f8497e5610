"""`python -m laneway`: the `laneway` command (laneway/cli/)."""

from laneway.cli import main

raise SystemExit(main())
