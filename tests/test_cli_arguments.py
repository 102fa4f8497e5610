"""The values of the command line's options (laneway/cli/arguments.py): a JSON option read from
the text itself, a file (`@PATH`) or stdin (`-`), and what a value that cannot be read or is
not JSON is told: one `laneway:` line naming the option, exit 2.
"""

import json
from pathlib import Path

import pytest

from app.examples import approval
from laneway.cli import main
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import make_engine, until_status
from tests.test_cli import environment, laneway

ARGV_LIMIT = 128 * 1024  # Linux's MAX_ARG_STRLEN: no one argument of a command line is longer


async def test_a_payload_too_long_for_a_command_line_comes_from_a_file(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    payload = {"blob": "x" * (200 * 1024)}  # the server takes 256 KiB; argv holds 128 KiB
    file = tmp_path / "payload.json"
    file.write_text(json.dumps(payload))
    assert file.stat().st_size > ARGV_LIMIT
    env = environment(database_url)
    engine = make_engine(store, approval, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("approval", {"timeoutSeconds": 600})
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.WAITING, timeout=30)
        code, out, err = await laneway(
            "signal", str(enqueued.instance_id), "approve", "--payload", f"@{file}", env=env
        )
        assert code == 0, err
        assert json.loads(out)["accepted"] is True
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    assert done.result == {"approved": True, "payload": payload}


async def test_params_come_from_stdin(database_url: str) -> None:
    env = environment(database_url)
    stdin = b'\xef\xbb\xbf{"name": "From stdin \xc3\xa9"}\n'  # an editor's byte order mark too
    code, out, err = await laneway("enqueue", "hello", "--params", "-", env=env, stdin=stdin)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    code, out, err = await laneway("status", instance_id, "--json", env=env)
    assert code == 0, err
    assert json.loads(out)["params"] == {"name": "From stdin é"}


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


ID = "00000000-0000-7000-8000-000000000000"


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["enqueue", "hello"], "--params"),
        (["resume", ID], "--input"),
        (["signal", ID, "approve"], "--payload"),
    ],
)
def test_a_json_option_that_cannot_be_read_or_is_not_json_is_a_usage_error(
    command: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused as the command line is read: before any database or server is used.
    missing = tmp_path / "missing.json"
    says = f"laneway: {command[0]}: argument {option}: "
    err = _refusal([*command, option, f"@{missing}"], capsys)
    assert err.startswith(f"{says}cannot read the file '{missing}': No such file or directory")
    err = _refusal([*command, option, f"@{tmp_path}"], capsys)
    assert err.startswith(f"{says}cannot read the file '{tmp_path}': Is a directory"), err
    bad = tmp_path / "bad.json"
    for content in (b'{"a": 1,}', b'{"a": NaN}', b"\xff\xfe", b""):
        bad.write_bytes(content)
        err = _refusal([*command, option, f"@{bad}"], capsys)
        assert err.startswith(f"{says}the file '{bad}' does not hold valid JSON: "), err
    err = _refusal([*command, option, "{a: 1}"], capsys)
    assert err.startswith(f"{says}not valid JSON: Expecting property name"), err
    for number in ("1e400", "1e-400"):  # a number a float cannot hold: 1e-400 is not 0.0
        err = _refusal([*command, option, '{"a": ' + number + "}"], capsys)
        assert err.startswith(f"{says}not valid JSON: number out of range"), err


async def test_stdin_that_is_not_json_is_a_usage_error_naming_the_option() -> None:
    code, out, err = await laneway(
        "enqueue", "hello", "--params", "-", env=environment(None), stdin=b"not json"
    )
    assert code == 2
    assert out == ""
    assert err.startswith(
        "laneway: enqueue: argument --params: stdin does not hold valid JSON: Expecting value"
    ), err
