"""The embedded PostgreSQL is shared by every Laneway service of a process that uses its folder.

Two services in one process (nested open_services(), two mounted apps) reach the same server
through one pgserver handle: it must keep running until the last of them has exited.
"""

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from laneway.config import Settings
from laneway.services import open_services
from laneway.store.databases import stop_leftover_postmaster
from tests.workflows import noop


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A folder for one embedded server; whatever still runs there is stopped afterwards."""
    # Not pytest's tmp_path: pytest prunes old ones while another run may still use them.
    folder = Path(tempfile.mkdtemp(prefix="laneway-embedded-test-"))
    try:
        yield folder
    finally:
        stop_leftover_postmaster(folder / "pg")
        shutil.rmtree(folder, ignore_errors=True)


async def test_the_embedded_server_outlives_an_inner_service_when_services_are_nested(
    data_dir: Path,
) -> None:
    settings = Settings(data_dir=data_dir, owner_id="outer")
    async with open_services(settings, workflows=[noop]) as outer:
        inner_settings = replace(settings, owner_id="inner")
        async with open_services(inner_settings, workflows=[noop]) as inner:
            await inner.engine.enqueue("noop")
        # The inner service has let go of the server; the outer one still uses it, and its
        # running engine releases its leases over it when it stops.
        enqueued = await outer.engine.enqueue("noop")
        async with outer.engine.running():
            record = await outer.engine.wait(enqueued.instance_id, timeout=30)
        assert record.status == "completed"
        assert (data_dir / "pg" / "postmaster.pid").exists()
    # The last user has exited: the server is stopped (pg_ctl stop removes its pid file).
    assert not (data_dir / "pg" / "postmaster.pid").exists()
