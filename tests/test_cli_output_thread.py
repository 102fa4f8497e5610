"""OutputThread (laneway/cli/output_thread.py): writes that never make the event loop wait for
the reader, all written in order once it reads again, and a reader that went away said at once.

Each test writes into a pipe of 4096 bytes whose reader the test controls.
"""

import asyncio
import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from typing import TextIO

import pytest

from laneway.cli.output_thread import OutputThread, output_thread

PIPE_BYTES = 4096


@contextlib.contextmanager
def small_pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    try:
        yield read_end, write_end
    finally:
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def text_stream(fd: int) -> Iterator[TextIO]:
    """`fd` as stdout is: a text file (which `output_thread` takes its descriptor from)."""
    with open(fd, "w", encoding="utf-8", closefd=False) as stream:
        yield stream


def read_all(fd: int, into: bytearray) -> threading.Thread:
    """A thread that reads `fd` to its end into `into`: the reader coming back."""

    def run() -> None:
        while chunk := os.read(fd, 65536):
            into.extend(chunk)

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    return reader


async def test_writes_never_wait_for_a_paused_reader_and_all_arrive_in_order() -> None:
    lines = [f"{i:05d} {'x' * 90}\n" for i in range(1000)]  # 100 kB: 25 pipes full
    with small_pipe() as (read_end, write_end):
        output = OutputThread(write_end, encoding="utf-8", errors="strict", on_failure=list)
        for line in lines:  # 25 times what the pipe holds, and nobody reads it yet
            assert output.write(line) == len(line)
        async with asyncio.timeout(10):
            await output.room()
        assert output.isatty() is False
        received = bytearray()
        reader = read_all(read_end, received)
        async with asyncio.timeout(10):
            await output.drained()
        output.close()
        os.close(write_end)
        reader.join(10)
    assert received.decode() == "".join(lines)


async def test_a_reader_gone_is_raised_by_the_next_write_and_reported_at_once() -> None:
    failed = asyncio.Event()
    with small_pipe() as (read_end, write_end):
        output = OutputThread(write_end, encoding="utf-8", errors="strict", on_failure=failed.set)
        os.close(read_end)
        output.write("nobody reads this\n")
        async with asyncio.timeout(10):
            await failed.wait()
        with pytest.raises(BrokenPipeError):
            output.write("nor this\n")
        with pytest.raises(BrokenPipeError):
            await output.drained()
        output.close()


async def test_the_block_ends_with_broken_pipe_when_the_reader_goes_away() -> None:
    # `laneway watch --json | head -1`, waiting for events that do not come: the block ends as
    # a blocking print's BrokenPipeError ended it, and the task is not left cancelled.
    async def wait_for_nothing(stream: TextIO, read_end: int) -> None:
        async with asyncio.timeout(10), output_thread(stream) as output:
            output.write("the first line\n")
            await output.drained()
            os.close(read_end)
            output.write("the second line\n")
            await asyncio.Event().wait()  # no event comes

    with (
        small_pipe() as (read_end, write_end),
        text_stream(write_end) as stream,
        pytest.raises(BrokenPipeError),
    ):
        await wait_for_nothing(stream, read_end)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_the_block_waits_until_everything_is_written() -> None:
    received = bytearray()
    with small_pipe() as (read_end, write_end):
        with text_stream(write_end) as stream:
            async with asyncio.timeout(10), output_thread(stream) as output:
                for i in range(100):
                    output.write(f"{i:03d} {'y' * 96}\n")  # 10 kB: more than the pipe holds
                reader = read_all(read_end, received)
        os.close(write_end)
        reader.join(10)
    assert received.decode().splitlines() == [f"{i:03d} {'y' * 96}" for i in range(100)]
