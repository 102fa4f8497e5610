"""An app with no API tokens warns once when it first answers a client off this machine.

Embedded (`uvicorn mounted:app --host 0.0.0.0`), nothing refuses the bind as `laneway serve`
does, so the log is where the operator learns that the API is open. Requests go through
httpx's ASGITransport, whose `client` is the address the app sees.
"""

import dataclasses
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from laneway.api import create_app
from laneway.api.auth import BearerTokens, Caller, Decision
from laneway.api.http.open_access import OpenAccessNotice, remote_client
from laneway.config import Settings
from tests.api.conftest import TOKEN, make_settings

ENQUEUE = 'mutation { enqueueWorkflow(name: "hello", params: {name: "x"}) { created } }'
LOGGER = "laneway.api.http.open_access"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def answer(app: Any, client: tuple[str, int], *paths: str) -> list[int]:
    """Each path's status: a POST of an enqueue for /graphql, a GET for the others."""
    transport = httpx.ASGITransport(app=app, client=client)
    statuses = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for path in paths:
            if path.endswith("/graphql"):
                response = await http.post(path, json={"query": ENQUEUE})
                assert response.json()["data"] == {"enqueueWorkflow": {"created": True}}
            else:
                response = await http.get(path)
            statuses.append(response.status_code)
    return statuses


@pytest.fixture
def open_settings(database_url: str) -> Settings:
    return make_settings(database_url, engine_enabled=False)


async def test_an_open_app_warns_once_when_a_remote_client_is_answered(
    open_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    laneway_app = create_app(open_settings)
    host = Starlette(routes=[Mount("/laneway", laneway_app)])  # mounted.py's shape
    with caplog.at_level("WARNING", logger=LOGGER):
        async with laneway_app.running():
            assert await answer(host, ("127.0.0.1", 5000), "/laneway/healthz") == [200]
            assert warnings_of(caplog) == []  # loopback: nothing to say
            paths = ("/laneway/graphql", "/laneway/healthz", "/laneway/graphql")
            assert await answer(host, ("203.0.113.7", 5000), *paths) == [200, 200, 200]
            assert await answer(host, ("198.51.100.9", 5000), "/laneway/graphql") == [200]
    (said,) = warnings_of(caplog)  # once per app, and nothing refused
    assert "LANEWAY_API_TOKENS" in said
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.__dict__["client"] == "203.0.113.7"
    assert not laneway_app.open_access.pending


@pytest.mark.parametrize("client", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
async def test_an_open_app_says_nothing_to_loopback_clients(
    open_settings: Settings, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    laneway_app = create_app(open_settings)
    with caplog.at_level("WARNING", logger=LOGGER):
        async with laneway_app.running():
            assert await answer(laneway_app, (client, 5000), "/graphql", "/healthz") == [200, 200]
    assert warnings_of(caplog) == []
    assert laneway_app.open_access.pending  # it would still warn at a remote client


class EveryoneMayRead:
    async def may_read(self, caller: Caller) -> Decision:
        return Decision.ALLOW

    async def may_write(self, caller: Caller) -> Decision:
        return Decision.FORBIDDEN


@pytest.mark.parametrize(
    ("changes", "permission", "pending"),
    [
        ({}, None, True),
        ({"api_tokens": (TOKEN,)}, None, False),
        ({"allow_insecure": True}, None, False),  # open on purpose
        ({}, EveryoneMayRead(), False),  # the host's own rule: not ours to judge
        ({}, BearerTokens(tokens=()), True),
        ({}, BearerTokens(tokens=(TOKEN,)), False),
    ],
)
def test_only_an_app_open_by_default_has_a_warning_to_give(
    changes: dict[str, Any], permission: Any, pending: bool
) -> None:
    settings = dataclasses.replace(Settings(), **changes)
    app = create_app(settings, permission=permission)
    assert app.open_access.pending is pending


@pytest.mark.parametrize(
    ("client", "remote"),
    [
        (("203.0.113.7", 1), "203.0.113.7"),
        (("10.0.0.5", 1), "10.0.0.5"),
        (("2001:db8::1", 1), "2001:db8::1"),
        (("::ffff:10.0.0.5", 1), "::ffff:10.0.0.5"),
        (("127.0.0.1", 1), None),
        (("::1", 1), None),
        (("testclient", 50000), None),  # Starlette's TestClient: no address
        (None, None),  # a Unix socket
    ],
)
def test_remote_client_is_an_address_off_this_machine(
    client: tuple[str, int] | None, remote: str | None
) -> None:
    assert remote_client({"type": "http", "client": client}) == remote


def test_a_lifespan_message_is_no_client(caplog: pytest.LogCaptureFixture) -> None:
    notice = OpenAccessNotice(Settings(), BearerTokens(tokens=()))
    notice.seen({"type": "lifespan"})
    assert notice.pending
    assert warnings_of(caplog) == []
