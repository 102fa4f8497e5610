"""Starts and stops the embedded PostgreSQL (the `pgserver` package) kept in a data folder.

Owns the embedded server's lifetime. Used when no DATABASE_URL is set, so `make run` and
`make test` need nothing installed by hand.
"""

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def embedded_postgres(data_dir: Path, *, stop_on_exit: bool = True) -> Iterator[str]:
    """Start (or reuse) the PostgreSQL whose data lives in `data_dir/pg`; yield its URL.

    The server listens on a unix socket only. With `stop_on_exit`, it stops when the last
    process using it lets go of it.
    """
    pgdata = (data_dir / "pg").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset; that is harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import get_server

        server = get_server(pgdata, cleanup_mode="stop" if stop_on_exit else None)
    url = str(server.get_uri())
    logger.info("embedded postgres ready", extra={"pgdata": str(pgdata)})
    try:
        yield url
    finally:
        if stop_on_exit:
            server.cleanup()
