"""Rate limits per token (per IP without one), over HTTP and websockets.

The buckets and the cost rule are checked with a hand-driven clock; the admitted rate,
the 429 and the websocket error against a real uvicorn with small configured limits.
"""

import asyncio
import json
import time
from typing import Any

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from laneway.api.graphql.documents import cache_info
from laneway.api.http.rate_limits import (
    NOT_AN_ADDRESS,
    RateLimiter,
    TokenBucket,
    client_key,
    root_field_cost,
)
from laneway.config import Settings
from laneway.errors import InvalidInputError
from tests.api.conftest import TOKEN, escaped, live_server, make_settings

PROTOCOL = Subprotocol("graphql-transport-ws")
OTHER_TOKEN = "another-token"
ENQUEUE = 'mutation { enqueueWorkflow(name: "noop") { instanceID } }'
ALIASED = "{ " + " ".join(f"w{n}: workflows {{ name }}" for n in range(15)) + " }"


def test_the_limits_are_read_from_the_environment() -> None:
    defaults = Settings.from_env({})
    assert (defaults.rate_limit_per_second, defaults.rate_burst) == (20.0, 40)
    assert (defaults.ws_handshakes_per_minute, defaults.ws_connections_per_token) == (10, 5)
    assert defaults.operation_timeout_seconds == 10.0
    tuned = Settings.from_env(
        {
            "LANEWAY_RATE_LIMIT": "0",
            "LANEWAY_RATE_BURST": "3",
            "LANEWAY_WS_HANDSHAKES_PER_MINUTE": "0",
            "LANEWAY_WS_CONNECTIONS_PER_TOKEN": "2",
            "LANEWAY_OPERATION_TIMEOUT": "2.5",
        }
    )
    assert (tuned.rate_limit_per_second, tuned.rate_burst) == (0.0, 3)
    assert (tuned.ws_handshakes_per_minute, tuned.ws_connections_per_token) == (0, 2)
    assert tuned.operation_timeout_seconds == 2.5
    with pytest.raises(InvalidInputError, match="LANEWAY_RATE_BURST"):
        Settings.from_env({"LANEWAY_RATE_BURST": "0"})


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_admits_its_burst_then_its_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(5.0, 5.0, clock=clock)
    assert [limiter.take("a") for _ in range(5)] == [0.0] * 5
    assert limiter.take("a") == pytest.approx(0.2)
    assert limiter.take("b") == 0.0  # another client has its own bucket
    clock.now += 0.2
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    clock.now += 60
    assert [limiter.take("a") for _ in range(6)].count(0.0) == 5  # refills to the burst only


def test_a_cost_spends_several_tokens_and_never_more_than_the_burst() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1.0, 40.0, clock=clock)
    assert limiter.take("a", 15) == 0.0
    assert limiter.take("a", 15) == 0.0
    assert limiter.take("a", 15) == pytest.approx(5.0)
    assert limiter.take("a", 10) == 0.0
    clock.now += 1000
    assert limiter.take("a", 500) == 0.0  # costs at most the burst, so it can ever pass
    assert limiter.take("a", 1) > 0


def test_a_client_is_its_valid_token_however_spelled_else_its_address() -> None:
    tokens = (TOKEN, OTHER_TOKEN)
    address = ("10.1.2.3", 5555)
    keys = {client_key(f"{scheme} {TOKEN}", tokens, address) for scheme in ("Bearer", "bearer ")}
    assert len(keys) == 1
    key = keys.pop()
    assert key is not None
    assert key.startswith("token:")
    assert client_key(f"Bearer {TOKEN}", tokens, address) != client_key(
        f"Bearer {OTHER_TOKEN}", tokens, address
    )
    for wrong in (None, "Bearer guess", TOKEN, 7):
        assert client_key(wrong, tokens, address) == "ip:10.1.2.3"
    assert client_key(f"Bearer {TOKEN}", (), address) == "ip:10.1.2.3"


def test_an_address_counts_however_it_is_written_and_any_other_string_as_one() -> None:
    """What uvicorn sets as the client from a trusted peer's X-Forwarded-For is any string."""
    spellings = ("::1", "0:0:0:0:0:0:0:1", "0000::0001", "::1%eth0", "::1%zz")
    assert {client_key(None, (), (s, 0), limit_local=True) for s in spellings} == {"ip:::1"}
    assert client_key(None, (), ("::ffff:10.1.2.3", 0)) == "ip:10.1.2.3"
    for garbage in ("zz0", "zz1", "localhost", "unknown", "", "10.1.2.3:x", "01.2.3.4"):
        assert client_key(None, (), (garbage, 0), limit_local=False) == NOT_AN_ADDRESS
    assert client_key(None, (), None, limit_local=False) == NOT_AN_ADDRESS
    assert client_key(None, (), ("127.0.0.1", 0), limit_local=False) is None
    assert client_key(None, (), ("0:0::1", 0), limit_local=False) is None


def test_an_ipv6_client_counts_by_its_64_bit_prefix() -> None:
    """A host is handed a whole /64 (one interface, SLAAC, privacy addresses): keyed by
    address, each of its 2^64 addresses was a fresh bucket."""
    one = client_key(None, (), ("2001:db8:1:2::1", 0))
    assert one == "ip:2001:db8:1:2::/64"
    assert client_key(None, (), ("2001:db8:1:2:ffff:abcd:1:9", 0)) == one
    assert client_key(None, (), ("2001:db8:1:3::1", 0)) != one
    assert client_key(None, (), ("::1", 0)) == "ip:::1"  # loopback: the address, as before


def test_the_buckets_stay_bounded_when_none_has_refilled() -> None:
    """Past max_keys, full (refilled) buckets are forgotten; when none is, the oldest go,
    a quarter at a time, instead of the table growing and every new client scanning it."""
    clock = FakeClock()
    limiter = RateLimiter(0.001, 2.0, clock=clock, max_keys=8)
    for n in range(50):
        limiter.take(f"k{n}")  # each bucket spent from: none full
        assert len(limiter._buckets) <= 8
    assert "k49" in limiter._buckets
    assert "k0" not in limiter._buckets


async def test_forwarded_client_addresses_that_are_not_ip_addresses_share_one_bucket(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From 127.0.0.1, which uvicorn trusts by default, a client's X-Forwarded-For is taken
    as its address, any string: a new one per request was a new bucket, and no limit held."""
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)  # uvicorn's default, loopback
    settings = make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        rate_limit_per_second=0.01,
        rate_burst=3,
    )
    query = {"query": "{ workflows { name } }"}
    async with live_server(settings) as server:

        async def status(forwarded: str) -> int:
            headers = {"x-forwarded-for": forwarded}
            response = await server.client.post("/graphql", json=query, headers=headers)
            return response.status_code

        invented = [await status(f"zz{n}") for n in range(6)]
        # An address however spelled is one client too: ::1, 0::1, ::1%a…
        spelled = [await status(s) for s in ("2001:db8::7", "2001:db8:0::7", "2001:db8::7%a")]
        spelled.append(await status("2001:0db8::0007%b"))
        # A real address (a proxy that uvicorn trusts forwarded it) is its own client.
        other = await status("203.0.113.9")
    assert invented == [200, 200, 200, 429, 429, 429]
    assert spelled == [200, 200, 200, 429]
    assert other == 200


def test_full_buckets_are_forgotten_when_there_are_too_many() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10.0, 2.0, clock=clock, max_keys=3)
    for key in ("a", "b", "c"):
        limiter.take(key)
    clock.now += 1
    limiter.take("d")
    assert set(limiter._buckets) == {"d"}
    bucket = TokenBucket(rate=1.0, burst=2.0, tokens=0.0, updated_at=0.0)
    assert not bucket.is_full(1.0)
    assert bucket.is_full(2.0)


@pytest.mark.parametrize(
    ("query", "operation_name", "cost"),
    [
        ("{ workflows { name } }", None, 1),
        ("{ workflows { name } queues { name } schedules { name } }", None, 3),
        (ALIASED, None, 15),
        ("{ a: workflows { name } a: workflows { name } }", None, 1),
        ("{ ...F ...F } fragment F on Query { x: workflows { name } y: queues { name } }", None, 2),
        ("{ ... on Query { workflows { name } } queues { name } }", None, 2),
        (
            "query A { workflows { name } } query B { a: queues { name } b: queues { name } }",
            "B",
            2,
        ),
        ("query A { workflows { name } }", "Z", 1),
        ("{ workflows { name }", None, 1),
        (123, None, 1),
        (
            "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A q: queues { name } }",
            None,
            1,
        ),
        # A long document costs one token per 2 KiB (parsing and validating it costs the
        # server in proportion), whether it parses or not.
        ("{ workflows { " + "name " * 2000 + "} }", None, 4),
        ("{ workflows { " + "name " * 2000, None, 4),
        ("#" + "x" * 4095 + "\n{ workflows { name } }", None, 2),
    ],
)
def test_a_request_costs_its_root_fields(
    query: object, operation_name: str | None, cost: int
) -> None:
    assert root_field_cost(query, operation_name) == cost


def ok(response: httpx.Response) -> bool:
    return response.status_code == 200


async def test_admitted_requests_stay_within_rate_and_burst(
    database_url: str, admin: asyncpg.Connection
) -> None:
    rate, burst = 5.0, 5
    settings = make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        rate_limit_per_second=rate,
        rate_burst=burst,
    )
    async with live_server(settings) as server:
        # All at once: never more than the burst.
        began = time.monotonic()
        at_once = await asyncio.gather(
            *(server.client.post("/graphql", json={"query": ENQUEUE}) for _ in range(20))
        )
        elapsed = time.monotonic() - began
        assert 1 <= sum(map(ok, at_once)) <= burst + rate * elapsed
        refused = next(r for r in at_once if r.status_code == 429)
        assert refused.json() == {
            "errors": [
                {"message": "Too many requests; slow down.", "extensions": {"code": "RATE_LIMITED"}}
            ]
        }
        assert int(refused.headers["retry-after"]) >= 1
        # Then a steady hammering for two seconds.
        admitted_at: list[float] = []
        began = time.monotonic()
        while time.monotonic() - began < 2.0:
            response = await server.client.post("/graphql", json={"query": ENQUEUE})
            assert response.status_code in (200, 429)
            if ok(response):
                admitted_at.append(time.monotonic() - began)
        window = time.monotonic() - began
    admitted = len(admitted_at)
    print(f"admitted {admitted} in {window:.2f} s ({admitted / window:.2f}/s at {rate:g}/s)")
    # The bucket starts (nearly) empty after the burst above, so it admits about rate × window.
    assert rate * window * 0.8 <= admitted <= burst + rate * window + 1
    for i, start in enumerate(admitted_at):
        for j in range(i, len(admitted_at)):
            span = admitted_at[j] - start
            assert j - i + 1 <= burst + rate * span + 1
    # A refused request ran nothing: one instance per admitted request.
    created = await admin.fetchval("SELECT count(*) FROM laneway.instances")
    assert created == sum(map(ok, at_once)) + admitted


async def test_fifteen_aliased_fields_cost_fifteen(database_url: str) -> None:
    settings = make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        rate_limit_per_second=0.01,
        rate_burst=40,
    )
    async with live_server(settings) as server:
        statuses = [
            (await server.client.post("/graphql", json={"query": query})).status_code
            for query in (ALIASED, ALIASED, ALIASED, "{ workflows { name } }")
        ]
    assert statuses == [200, 200, 429, 200]


async def test_each_token_has_its_own_bucket_and_a_wrong_one_counts_as_its_address(
    database_url: str,
) -> None:
    settings = make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        api_tokens=(TOKEN, OTHER_TOKEN),
        open_reads=True,
        rate_limit_per_second=0.01,
        rate_burst=2,
    )
    query = {"query": "{ workflows { name } }"}

    async def status(token: str | None) -> int:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        response = await server.client.post("/graphql", json=query, headers=headers)
        return response.status_code

    async with live_server(settings) as server:
        assert [await status(TOKEN) for _ in range(3)] == [200, 200, 429]
        assert [await status(OTHER_TOKEN) for _ in range(3)] == [200, 200, 429]
        assert [await status(None), await status("guess-1"), await status("guess-2")] == [
            200,
            200,
            429,
        ]


async def subscribe(ws: Any, operation_id: str) -> None:
    query = (
        "{ workflows { name } }"
        if operation_id.startswith("q")
        else "subscription { workflowEvents { eventID } }"
    )
    await ws.send(
        json.dumps({"id": operation_id, "type": "subscribe", "payload": {"query": query}})
    )


def nearly_empty_bucket(database_url: str, *, burst: int) -> Settings:
    """An API-only server whose clients (local ones too) get `burst` requests, then wait."""
    return make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        rate_limit_per_second=0.01,
        rate_burst=burst,
    )


async def test_over_the_limit_a_websocket_operation_gets_rate_limited_and_the_socket_stays(
    database_url: str,
) -> None:
    async with (
        live_server(nearly_empty_bucket(database_url, burst=2)) as server,
        connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await subscribe(ws, "s1")
        await subscribe(ws, "s2")
        await subscribe(ws, "q3")
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert reply["id"] == "q3"
        assert reply["type"] == "error"
        assert reply["payload"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert reply["payload"][0]["extensions"]["retryAfter"] >= 1
        await ws.send(json.dumps({"type": "ping"}))
        async with asyncio.timeout(10):
            assert json.loads(await ws.recv())["type"] == "pong"
        # The HTTP side spends from the same bucket.
        response = await server.client.post("/graphql", json={"query": "{ workflows { name } }"})
        assert response.status_code == 429


@pytest.mark.parametrize("spelled", ["init", "subscribe"])
async def test_a_subscribe_is_rate_limited_however_its_messages_are_spelled(
    database_url: str, spelled: str
) -> None:
    # Escaping connection_init's `type` once exempted every later subscribe, plain or not.
    init = {"type": "connection_init", "payload": {}}
    async with (
        live_server(nearly_empty_bucket(database_url, burst=2)) as server,
        connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(escaped(init) if spelled == "init" else json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        for operation_id in ("q1", "q2", "q3"):
            frame = {
                "id": operation_id,
                "type": "subscribe",
                "payload": {"query": "{ __typename }"},
            }
            await ws.send(escaped(frame) if spelled == "subscribe" else json.dumps(frame))
        ended: dict[str, dict[str, Any]] = {}
        async with asyncio.timeout(10):
            while len(ended) < 3:
                reply = json.loads(await ws.recv())
                if reply["type"] in ("complete", "error"):
                    ended[reply["id"]] = reply
    assert [ended[n]["type"] for n in ("q1", "q2")] == ["complete", "complete"]
    assert ended["q3"]["type"] == "error", ended["q3"]
    assert ended["q3"]["payload"][0]["extensions"]["code"] == "RATE_LIMITED"


async def received_until_closed(ws: Any) -> tuple[list[dict[str, Any]], int | None]:
    """The messages that came until the server closed the socket, and its close code (None:
    still open after 10 s)."""
    received = []
    try:
        async with asyncio.timeout(10):
            while True:
                received.append(json.loads(await ws.recv()))
    except ConnectionClosed as closed:
        return received, closed.rcvd.code if closed.rcvd is not None else 1006
    except TimeoutError:
        return received, None


async def test_over_the_limit_a_duplicate_subscribe_id_still_closes_with_4409(
    database_url: str,
) -> None:
    # An `error` for an id whose subscription goes on would break the protocol: after an
    # error no `next` may come for that id.
    async with (
        live_server(nearly_empty_bucket(database_url, burst=1)) as server,
        connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await subscribe(ws, "s1")  # spends the bucket's only token
        await subscribe(ws, "s1")
        assert await received_until_closed(ws) == ([], 4409)


async def test_an_id_reused_once_its_operation_ended_spends_from_the_bucket(
    database_url: str,
) -> None:
    async with (
        live_server(nearly_empty_bucket(database_url, burst=2)) as server,
        connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await subscribe(ws, "s1")
        await ws.send(json.dumps({"id": "s1", "type": "complete"}))  # ended by the client
        await subscribe(ws, "q1")
        async with asyncio.timeout(10):
            while json.loads(await ws.recv()) != {"id": "q1", "type": "complete"}:
                pass  # ended by the server
        await subscribe(ws, "q1")
        await subscribe(ws, "s1")
        async with asyncio.timeout(10):
            replies = [json.loads(await ws.recv()) for _ in range(2)]
        assert [(r["id"], r["type"]) for r in replies] == [("q1", "error"), ("s1", "error")]
        assert {r["payload"][0]["extensions"]["code"] for r in replies} == {"RATE_LIMITED"}


async def read_until_closed(ws: Any) -> None:
    async with asyncio.timeout(10):
        while True:
            await ws.recv()


async def test_a_subscribe_before_connection_init_closes_with_4401_even_when_rate_limited(
    database_url: str,
) -> None:
    async with live_server(nearly_empty_bucket(database_url, burst=1)) as server:
        spent = await server.client.post("/graphql", json={"query": "{ workflows { name } }"})
        assert spent.status_code == 200
        empty = await server.client.post("/graphql", json={"query": "{ workflows { name } }"})
        assert empty.status_code == 429  # the bucket is empty: a limited subscribe is refused
        async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
            await subscribe(ws, "s1")
            with pytest.raises(ConnectionClosed) as closed:
                await read_until_closed(ws)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 4401


async def test_websocket_handshakes_are_capped_per_address(database_url: str) -> None:
    settings = make_settings(
        database_url, limit_local_clients=True, engine_enabled=False, ws_handshakes_per_minute=3
    )
    async with live_server(settings) as server:
        for _ in range(3):
            async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
                assert json.loads(await ws.recv())["type"] == "connection_ack"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(server.ws_url, subprotocols=[PROTOCOL]):
                pass
        response = refused.value.response
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1
        assert b"RATE_LIMITED" in response.body
        # Plain HTTP is not a handshake.
        assert (await server.client.get("/healthz")).status_code == 200


async def test_tokenless_clients_on_this_machine_are_not_limited_by_default(
    database_url: str,
) -> None:
    # `make run`, local scripts and the dashboard on 127.0.0.1: no token, no throttling.
    settings = make_settings(
        database_url, engine_enabled=False, rate_limit_per_second=0.01, rate_burst=1
    )
    query = {"query": "{ queues { name } }"}
    async with live_server(settings) as server, httpx.AsyncClient() as client:
        statuses = [(await client.post(server.http_url, json=query)).status_code for _ in range(5)]
    assert statuses == [200] * 5


async def test_a_large_document_costs_its_size_and_over_the_limit_is_not_parsed(
    database_url: str,
) -> None:
    """Found by an outside audit: ~20 KB documents from one client, refused 429 or not, were
    each parsed (and the admitted ones validated) at ~80 ms apiece, so eight connections within
    the rate limit stalled every other client for seconds."""
    settings = make_settings(
        database_url,
        limit_local_clients=True,
        engine_enabled=False,
        rate_limit_per_second=0.01,
        rate_burst=20,
    )
    fields = " ".join(["instanceID"] * 1900)
    async with live_server(settings) as server:

        async def send(n: int) -> httpx.Response:
            document = f"# {n}\n{{ workflowInstances(limit: 1) {{ {fields} }} }}"
            return await server.client.post("/graphql", json={"query": document})

        # A document that names no operation to run is refused as before (charged first).
        two = {"query": "query A { __typename } query B { __typename }"}
        unnamed = await server.client.post("/graphql", json=two)
        assert unnamed.status_code == 400
        assert unnamed.json()["errors"][0]["extensions"]["code"] == "OPERATION_RESOLUTION_FAILURE"
        # 20,9xx characters cost 10 tokens: one passes the 19 left, the second is refused.
        assert [(await send(n)).status_code for n in range(2)] == [200, 429]
        parses = cache_info().parses
        refused = await send(2)
        assert refused.status_code == 429
        assert cache_info().parses == parses  # refused before anything parsed it
