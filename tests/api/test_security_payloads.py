"""The params size limit at the API: workflow params of 256 KiB pass, one byte more does not, and
ten concurrent 1 MiB requests leave the process's memory almost where it was.

The engine measures params (laneway/engine/payloads.py); these tests go through GraphQL over
HTTP to show the limit holds end to end and that a refused enqueue writes nothing. The
server runs in this process, so its memory is read from /proc/self.
"""

import asyncio
import json
from pathlib import Path

import asyncpg

from laneway.api.http.body_limits import MAX_BODY_BYTES
from laneway.engine.payloads import MAX_PAYLOAD_BYTES
from tests.api.conftest import LiveServer

ENQUEUE = """mutation ($params: JSON) {
  enqueueWorkflow(name: "noop", params: $params) { instanceID }
}"""
MIB = 1024 * 1024


def params_of_encoded_size(size: int) -> dict[str, str]:
    """Params whose compact JSON encoding is exactly `size` bytes."""
    overhead = len(json.dumps({"s": ""}, separators=(",", ":")))
    return {"s": "x" * (size - overhead)}


async def test_params_at_the_limit_pass_and_one_byte_more_is_refused_before_any_write(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    at_limit = params_of_encoded_size(MAX_PAYLOAD_BYTES)
    assert len(json.dumps(at_limit, separators=(",", ":"))) == MAX_PAYLOAD_BYTES
    accepted = await server.graphql(ENQUEUE, params=at_limit)
    assert accepted["data"]["enqueueWorkflow"]["instanceID"]
    refused = await server.graphql(ENQUEUE, params=params_of_encoded_size(MAX_PAYLOAD_BYTES + 1))
    assert refused["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "262145 bytes" in refused["errors"][0]["message"]
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 1


def memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} is not in /proc/self/status")


def reset_peak_memory() -> None:
    """Make VmHWM (peak RSS) start again from the current RSS (Linux clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


async def test_ten_concurrent_one_mib_requests_keep_memory_growth_small(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    body = json.dumps({"query": ENQUEUE, "variables": {"params": {"s": ""}}}).encode()
    padding = MAX_BODY_BYTES - len(body) - 64
    bodies = [
        json.dumps(
            {"query": ENQUEUE, "variables": {"params": {"s": chr(97 + n) * padding}}}
        ).encode()
        for n in range(10)
    ]
    assert all(MIB - 100 < len(b) <= MAX_BODY_BYTES for b in bodies)
    headers = {"content-type": "application/json"}
    # One round first, so the figures below do not count one-off allocations (caches, pools).
    await server.client.post("/graphql", content=bodies[0], headers=headers)
    reset_peak_memory()
    before = memory_kib("VmRSS")
    for _ in range(3):
        responses = await asyncio.gather(
            *(server.client.post("/graphql", content=b, headers=headers) for b in bodies)
        )
        for response in responses:
            assert response.status_code == 200
            assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    peak_growth_mib = (memory_kib("VmHWM") - before) / 1024
    after_growth_mib = (memory_kib("VmRSS") - before) / 1024
    print(
        f"RSS {before / 1024:.0f} MiB; growth: peak {peak_growth_mib:.1f} MiB, "
        f"after {after_growth_mib:.1f} MiB"
    )
    # Server and client share this process: each 1 MiB request is held a few times over
    # (client body, server buffer, decoded JSON, GraphQL variables) while it runs.
    assert peak_growth_mib < 64
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0
