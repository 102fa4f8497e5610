"""A websocket handshake refused on purpose is no error in the log (http/websocket_limits.py).

uvicorn's websockets-sansio implementation logs "ASGI callable returned without completing
handshake." at ERROR after an app returns without accepting, in the connection's own task,
whatever the app answered. Found by an outside audit: each deliberate 400/403/429 refusal
(a foreign host, the handshake rate) logged it, and log alerts fired on expected refusals.
These tests call the ASGI app and then log as uvicorn's run_asgi does, in one task.
"""

import asyncio
import logging
from typing import Any

import pytest
from starlette.applications import Starlette

from laneway.api.app import server_config
from laneway.api.http.websocket_limits import (
    REFUSED_HANDSHAKES,
    UNFINISHED_HANDSHAKE,
    refuse_handshake,
)

SCOPE: dict[str, Any] = {"type": "websocket", "extensions": {"websocket.http.response": {}}}


async def _refusing(scope: Any, receive: Any, send: Any) -> None:
    await refuse_handshake(scope, receive, send, 429, "slow down", "RATE_LIMITED")


async def _returning(scope: Any, receive: Any, send: Any) -> None:
    await receive()  # neither accepts nor answers: a broken app


async def _as_uvicorn_runs(app: Any) -> list[dict[str, Any]]:
    """Run `app` for one handshake in a task of its own, then log as uvicorn does after it."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run_asgi() -> None:
        await app(SCOPE, receive, send)
        logging.getLogger("uvicorn.error").error(UNFINISHED_HANDSHAKE)

    await asyncio.create_task(run_asgi())
    return sent


@pytest.fixture(autouse=True)
def _filtered() -> Any:
    server_config(Starlette(), host="127.0.0.1", port=0)  # what installs the filter
    yield
    logging.getLogger("uvicorn.error").removeFilter(REFUSED_HANDSHAKES)


async def test_a_refused_handshake_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        sent = await _as_uvicorn_runs(_refusing)
    assert sent[0]["status"] == 429  # the refusal itself went out
    assert not [r for r in caplog.records if r.getMessage() == UNFINISHED_HANDSHAKE]


async def test_an_app_that_neither_accepts_nor_refuses_is_still_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        await _as_uvicorn_runs(_refusing)  # a refusal in another task does not leak here
        await _as_uvicorn_runs(_returning)
    logged = [r for r in caplog.records if r.getMessage() == UNFINISHED_HANDSHAKE]
    assert [r.levelname for r in logged] == ["ERROR"]
