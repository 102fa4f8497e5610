"""A few hundred malformed and fuzzed requests leak nothing (A-09 in docs/reliability.md with
LANEWAY_CHAOS_FULL=1: 10,000 of them, and then p99 latency < 200 ms and the process's RSS
growth < 50 MiB are checked too; the PR tier only prints those two figures).

A seeded generator builds requests from the schema's own names (and near misses of them, to
tempt suggestions): documents with wrong fields, arguments, types, variables and directives,
truncated documents, odd JSON bodies, GET requests, good and bad tokens. Against the
production configuration (tokens, no GraphiQL, no introspection) none may answer 500, and no
body may carry a stack trace, SQL, the driver's name, a suggestion or where the server runs.
"""

import json
import os
import random
import socket
import time
from typing import Any

import httpx
from graphql import GraphQLObjectType, GraphQLSchema, get_named_type

from laneway.api.graphql.schema import schema
from tests.api.conftest import TOKEN, live_server, make_settings
from tests.sizes import FULL

SEED = 20260407
REQUESTS = 10_000 if FULL else 300
WARM_UP = 100  # requests before the RSS baseline (imports, caches, first connections)
LEAKS = (
    "Traceback",
    'File "',
    "asyncpg",
    "SELECT",
    "password",
    "Did you mean",
    "postgresql://",
    "laneway-pg",
    ".s.PGSQL",
    "Errno",
)


def near_miss(rng: random.Random, name: str) -> str:
    """`name` with one letter dropped, doubled or swapped: bait for "Did you mean"."""
    if len(name) < 3:
        return name + "x"
    i = rng.randrange(1, len(name) - 1)
    return rng.choice(
        [
            name[:i] + name[i + 1 :],
            name[:i] + name[i] + name[i:],
            name[: i - 1] + name[i] + name[i - 1] + name[i + 1 :],
        ]
    )


def some_value(rng: random.Random, depth: int = 0) -> str:
    """A GraphQL literal, valid or not for wherever it lands."""
    choices = [
        lambda: json.dumps(rng.choice(["", "hello", "noop", "0", "x" * 300, "\u0000", "é"])),
        lambda: str(rng.choice([0, -1, 7, 2**31, 10**40])),
        lambda: rng.choice(["1.5", "-0.0", "1e400", "true", "false", "null", "$undeclared"]),
        lambda: rng.choice(["RUNNING", "pending", '"00000000-0000-0000-0000-000000000000"']),
    ]
    if depth < 2:
        choices.append(lambda: "[" + ", ".join(some_value(rng, depth + 1) for _ in range(2)) + "]")
        choices.append(lambda: "{a: " + some_value(rng, depth + 1) + "}")
    return rng.choice(choices)()


class Generator:
    """Random requests over one schema's names."""

    def __init__(self, graphql_schema: GraphQLSchema, rng: random.Random) -> None:
        self.schema = graphql_schema
        self.rng = rng
        self.type_names = [n for n in graphql_schema.type_map if not n.startswith("__")]

    def name(self, real: list[str]) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return rng.choice(real)
        if roll < 0.9:
            return near_miss(rng, rng.choice(real))
        return rng.choice(["__schema", "__type", "__typename", "nope", "id"])

    def selection(self, object_type: GraphQLObjectType, depth: int) -> str:
        rng = self.rng
        parts = []
        for _ in range(rng.randint(1, 3)):
            name = self.name(list(object_type.fields))
            field = object_type.fields.get(name)
            text = (rng.choice(["a: ", "b: ", ""]) if rng.random() < 0.2 else "") + name
            if field is not None and (field.args or rng.random() < 0.2):
                args = list(field.args) or ["limit"]
                picked = {self.name(args) for _ in range(rng.randint(1, 2))}
                text += "(" + ", ".join(f"{a}: {some_value(rng)}" for a in picked) + ")"
            if rng.random() < 0.15:
                text += rng.choice([" @include(if: true)", " @skip(if: $v)", " @skipp"])
            inner = get_named_type(field.type) if field is not None else None
            if isinstance(inner, GraphQLObjectType) and depth < 4:
                text += " { " + self.selection(inner, depth + 1) + " }"
            elif rng.random() < 0.1:
                text += " { name }"
            parts.append(text)
        if rng.random() < 0.1:
            parts.append(f"... on {self.name(self.type_names)} {{ __typename }}")
        return " ".join(parts)

    def document(self) -> str:
        rng = self.rng
        kind, root = rng.choice(
            [
                ("query", self.schema.query_type),
                ("mutation", self.schema.mutation_type),
                ("subscription", self.schema.subscription_type),
            ]
        )
        assert root is not None
        header = kind
        if rng.random() < 0.3:
            header += f" Op($v: {self.name(self.type_names)}{rng.choice(['', '!'])})"
        text = f"{header} {{ {self.selection(root, 1)} }}"
        if rng.random() < 0.1:
            text += f" fragment F on {self.name(self.type_names)} {{ {self.name(['name'])} }}"
        if rng.random() < 0.1:
            text = text[: rng.randrange(1, len(text))]
        return text

    def request(self) -> dict[str, Any]:
        """Keyword arguments for httpx's `request`."""
        rng = self.rng
        headers = {}
        if rng.random() < 0.5:
            headers["authorization"] = rng.choice([f"Bearer {TOKEN}", "Bearer guess", "Basic x"])
        roll = rng.random()
        if roll < 0.7:
            body: dict[str, Any] = {"query": self.document()}
            if rng.random() < 0.4:
                body["variables"] = {"v": rng.choice([1, "x", None, [1], {"a": "b"}, 10**30])}
            if rng.random() < 0.2:
                body["operationName"] = rng.choice(["Op", "Other", "", 7])
            return {"method": "POST", "json": body, "headers": headers}
        if roll < 0.85:
            params = {"query": self.document()}
            if rng.random() < 0.3:
                params["variables"] = rng.choice(['{"v": 1}', "{", "[]", '{"v": NaN}'])
            return {"method": "GET", "params": params, "headers": headers}
        raw = rng.choice(
            [
                b'{"query": ' + json.dumps(self.document()).encode()[:-3],
                b'{"query": "{ workflows { name } }", "variables": ' + b"[" * 80 + b"]" * 80 + b"}",
                bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))),
                b'{"query": "{ workflows { name } }", "extensions": "x"}',
                b'["batch"]',
            ]
        )
        headers["content-type"] = rng.choice(["application/json", "text/plain", "application/xml"])
        return {"method": "POST", "content": raw, "headers": headers}


def leaks_in(response: httpx.Response) -> list[str]:
    host = socket.gethostname()
    words = [*LEAKS, host] if len(host) >= 4 else list(LEAKS)
    return [word for word in words if word in response.text]


async def test_fuzzed_requests_never_answer_500_or_leak(database_url: str) -> None:
    settings = make_settings(
        database_url, engine_enabled=False, api_tokens=(TOKEN,), graphiql=False
    )
    generator = Generator(schema._schema, random.Random(SEED))
    statuses: dict[int, int] = {}
    seconds: list[float] = []
    baseline_mib = 0.0
    async with live_server(settings) as server:
        for n in range(REQUESTS):
            if n == WARM_UP:
                baseline_mib = rss_mib()
            request = generator.request()
            started = time.perf_counter()
            response = await server.client.request(url="/graphql", **request)
            seconds.append(time.perf_counter() - started)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code < 500, (n, request, response.text)
            assert not leaks_in(response), (n, request, response.text)
        assert (await server.client.get("/healthz")).status_code == 200
        growth_mib = rss_mib() - baseline_mib
    # The generator reaches both execution and rejection, not only one of them.
    assert statuses.get(200, 0) >= REQUESTS // 4
    assert statuses.get(400, 0) >= REQUESTS // 20
    p99_ms = sorted(seconds)[int(0.99 * (len(seconds) - 1))] * 1000
    print(f"A-09: {REQUESTS} requests, p99 {p99_ms:.1f} ms, RSS growth {growth_mib:+.1f} MiB")
    if FULL:  # figures of the full tier, run by hand on a quiet machine (not in make test)
        assert p99_ms < 200
        assert growth_mib < 50


def rss_mib() -> float:
    """This process's resident set (server and client share it), in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
