"""The `requests` scenario of bench/service_bench.py: what one honest HTTP request costs.

One API-only server (`python -m app`, engine off, rate limits off, as the other scenarios start
it) on a fresh database; the bench process is the client, a minimal HTTP/1.1 keep-alive client
on raw asyncio streams with pre-encoded requests (httpx would cost the shared cores more than
the server spends on a trivial query). Measured, in this order, on the same database:

- the Python API's one-by-one enqueue rate: Engine.enqueue("hello") awaited one at a time from
  the bench process (its instances are also the rows the page query reads);
- server CPU per request (the server process's utime + stime over the requests, / requests)
  for /healthz, `{ __typename }` and the dashboard's `workflowInstances(limit: 50)` page, with
  CLIENTS keep-alive clients;
- `enqueueWorkflow` over HTTP with CLIENTS keep-alive clients: requests/s, p50 and p99, server
  CPU per request, and the rate as a ratio of the Python API's.

Every response is checked (status 200, no `errors`), so a figure never counts failures.
"""

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from service_bench import (
    Figures,
    fresh_database,
    own_cpu_seconds,
    percentile,
    process_cpu_seconds,
    running_server,
    writer_engine,
)

CLIENTS = 10
WARMUP = 200  # per kind: fills the pool, the caches and the interpreter's specializations
PAGE_LIMIT = 50
TYPENAME = "{ __typename }"
# The dashboard's list query and fields (laneway/api/static/dashboard.html).
PAGE = (
    "query Instances($limit: Int) { workflowInstances(limit: $limit) { instanceID name queue"
    " status attempts lastError createdAt updatedAt priority runAfter parentID stage checkpoint"
    " progress message } }"
)
ENQUEUE = 'mutation($p: JSON) { enqueueWorkflow(name: "hello", params: $p) { instanceID } }'


def post_request(port: int, path: str, body: object) -> bytes:
    """One complete HTTP/1.1 POST with a JSON body, encoded once and sent many times."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def get_request(port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


class KeepAliveClient:
    """One keep-alive HTTP/1.1 connection: a request written, its response read, in turn."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> "KeepAliveClient":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """The status and body of the response to `raw` (a Content-Length body only)."""
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise RuntimeError(f"unexpected transfer-encoding {value.strip()!r}")
        if length is None:
            raise RuntimeError(f"a response without Content-Length: {head!r}")
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def graphql_ok(status: int, body: bytes) -> bool:
    return status == 200 and b'"errors"' not in body


def http_ok(status: int, body: bytes) -> bool:
    return status == 200


@dataclass
class Run:
    """What a run of requests took: wall time, server and bench CPU, latency per request."""

    requests: int
    wall: float
    server_cpu: float
    bench_cpu: float
    latencies: list[float]

    @property
    def server_ms(self) -> float:
        return self.server_cpu / self.requests * 1000.0

    @property
    def bench_ms(self) -> float:
        return self.bench_cpu / self.requests * 1000.0

    @property
    def rate(self) -> float:
        return self.requests / self.wall


async def drive(
    clients: list[KeepAliveClient],
    raw: bytes,
    total: int,
    ok: Callable[[int, bytes], bool],
    server_pid: int,
) -> Run:
    """`total` requests `raw`, shared out over the clients, each sending its next one as soon
    as the previous answer is in."""
    remaining = total
    latencies: list[float] = []

    async def worker(client: KeepAliveClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            status, body = await client.request(raw)
            latencies.append(time.perf_counter() - started)
            if not ok(status, body):
                raise RuntimeError(f"request failed: {status} {body[:300]!r}")

    server_before, bench_before = process_cpu_seconds(server_pid), own_cpu_seconds()
    started = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in clients))
    wall = time.perf_counter() - started
    return Run(
        requests=total,
        wall=wall,
        server_cpu=process_cpu_seconds(server_pid) - server_before,
        bench_cpu=own_cpu_seconds() - bench_before,
        latencies=latencies,
    )


async def measured(
    clients: list[KeepAliveClient],
    raw: bytes,
    count: int,
    ok: Callable[[int, bytes], bool],
    server_pid: int,
    label: str,
) -> Run:
    await drive(clients, raw, WARMUP, ok, server_pid)
    run = await drive(clients, raw, count, ok, server_pid)
    print(
        f"    {label}: {run.rate:,.0f} req/s, server {run.server_ms:.3f} ms CPU/request,"
        f" bench {run.bench_ms:.3f} ms CPU/request,"
        f" p50 {percentile(run.latencies, 0.5) * 1000:.2f} ms",
        file=sys.stderr,
    )
    return run


async def requests_round(server_url: str, work_dir: Path, count: int) -> Figures:
    async with (
        fresh_database(server_url, "requests") as url,
        writer_engine(url) as engine,
        running_server(url, work_dir, engine=False) as server,
    ):
        for i in range(WARMUP):
            await engine.enqueue("hello", {"name": f"warm-up {i}"})
        started = time.perf_counter()
        for i in range(max(count, PAGE_LIMIT)):
            await engine.enqueue("hello", {"name": f"bench {i}"})
        python_rate = max(count, PAGE_LIMIT) / (time.perf_counter() - started)
        print(f"    Engine.enqueue one by one: {python_rate:,.0f}/s", file=sys.stderr)

        port = server.port
        clients = [await KeepAliveClient.open(port) for _ in range(CLIENTS)]
        try:
            health = await measured(
                clients, get_request(port, "/healthz"), count, http_ok, server.pid, "/healthz"
            )
            typename = await measured(
                clients,
                post_request(port, "/graphql", {"query": TYPENAME}),
                count,
                graphql_ok,
                server.pid,
                "{ __typename }",
            )
            page_body = {"query": PAGE, "variables": {"limit": PAGE_LIMIT}}
            page = await measured(
                clients,
                post_request(port, "/graphql", page_body),
                max(1, count // 4),
                graphql_ok,
                server.pid,
                f"workflowInstances(limit: {PAGE_LIMIT})",
            )
            enqueue_body = {"query": ENQUEUE, "variables": {"p": {"name": "http"}}}
            enqueue = await measured(
                clients,
                post_request(port, "/graphql", enqueue_body),
                count,
                graphql_ok,
                server.pid,
                f"enqueueWorkflow, {CLIENTS} clients",
            )
        finally:
            for client in clients:
                await client.close()
    return {
        "/healthz server CPU ms/request": health.server_ms,
        "{ __typename } server CPU ms/request": typename.server_ms,
        "{ __typename } requests/s": typename.rate,
        f"workflowInstances({PAGE_LIMIT}) server CPU ms/request": page.server_ms,
        f"enqueueWorkflow HTTP requests/s, {CLIENTS} clients": enqueue.rate,
        "enqueueWorkflow HTTP p50 ms": statistics.median(enqueue.latencies) * 1000,
        "enqueueWorkflow HTTP p99 ms": percentile(enqueue.latencies, 0.99) * 1000,
        "enqueueWorkflow server CPU ms/request": enqueue.server_ms,
        "Engine.enqueue one by one /s": python_rate,
        "enqueueWorkflow HTTP / Engine.enqueue": enqueue.rate / python_rate,
    }
