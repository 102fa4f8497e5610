"""Payload sizes count what PostgreSQL's jsonb holds and gives back (laneway/engine/payloads.py):
a float in exponent notation is stored as a numeric written out in full, so `[1e308] * 35000`,
about 245,000 bytes as text, was accepted under the 256 KiB cap and came back 10.9 MB."""

import re

import asyncpg
import pytest

from laneway.engine import Done, HandlerContext, Workflow
from laneway.engine.payloads import MAX_PAYLOAD_BYTES, encode_json, json_size
from laneway.errors import InvalidInputError
from laneway.model import JSONValue
from laneway.store import Store
from tests.engine.helpers import make_engine

OUTSIDE_STRINGS_SPACE = re.compile(r'("(?:[^"\\]|\\.)*")| ')
SAMPLES: list[JSONValue] = [
    {"pad": [1e308, -1e308, 1e-300, 1.5e-07, 1e16, 1e20, 2.5e-05]},
    [0.1, 1.0, 10**40, 3.14, 1e22],
    {"text": "1e+308 inside a string is text", "e-mail": "a-e-b", "n": 6.02e23},
    {"nested": [{"x": 9.999e-5}, {"y": '"quoted" 1e+5'}], "z": 1e5},
    "only a string with e+ and e- in it",
]


@pytest.mark.parametrize("value", SAMPLES)
async def test_the_measure_is_the_length_of_what_jsonb_gives_back(
    admin: asyncpg.Connection, value: JSONValue
) -> None:
    text = encode_json(value, what="params")
    given_back: str = await admin.fetchval("SELECT $1::jsonb::text", text)
    # jsonb's text puts a space after each ':' and ','; the measure is of the compact form.
    compact = OUTSIDE_STRINGS_SPACE.sub(lambda m: m.group(1) or "", given_back)
    assert json_size(text) == len(compact)


def test_numbers_written_out_in_full_count_against_the_cap() -> None:
    amplified = {"pad": [1e308] * 35_000}
    assert len(encode_json({"pad": [1.5] * 35_000}, what="params")) < MAX_PAYLOAD_BYTES
    with pytest.raises(InvalidInputError, match=r"^params is 10850009 bytes encoded; the limit"):
        encode_json(amplified, what="params")


def test_a_string_that_looks_like_a_number_counts_as_its_text() -> None:
    text = encode_json({"s": "1e+308" * 40_000}, what="params")
    assert json_size(text) == len(text)


async def test_a_signal_payload_of_amplified_numbers_is_refused_before_any_write(
    store: Store, admin: asyncpg.Connection
) -> None:
    async def wait(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({})

    engine = make_engine(store, Workflow("w", handlers={"run": wait}, initial="run"))
    enqueued = await engine.enqueue("w", {})
    with pytest.raises(InvalidInputError, match="bytes encoded; the limit is 262144"):
        await engine.signal(enqueued.instance_id, "go", {"pad": [1e308] * 35_000})
    assert await admin.fetchval("SELECT count(*) FROM laneway.signals") == 0
