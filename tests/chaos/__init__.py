"""Chaos tests (docs/reliability.md): worker crashes, stalls, partitions, fault points, restarts.

The PR tier runs in `make test` (test_*.py, fast parameters); the full tier is
`python -m tests.chaos.full` (`make chaos`), the same scenarios at production parameters.

Harness: supervisor.py (worker processes, the fault journal), proxy.py (TCP proxy),
ledger.py (side-effect ledger, audit trigger), workflows.py (W3, WP, poison), checker.py (the
offline history checker), harness.py (one run), postgres.py (a private server and pg_ctl),
client.py (an API-side process for cancel faults). Scenarios: crashes.py (R-01 to R-04, R-06),
fault_points.py (R-05), database_faults.py (P-01, P-02, P-05). docs/reliability.md has the
figures.
"""
