"""Log formatters: JSON lines and text both carry the `extra` fields."""

import io
import json
import logging

from laneway.logs import JSONFormatter, TextFormatter, configure_command_logging, configure_logging


def record_with_extra() -> logging.LogRecord:
    record = logging.LogRecord("app.x", logging.INFO, __file__, 1, "instance claimed", None, None)
    record.instance_id = "abc"
    record.attempt = 2
    return record


def test_json_formatter_writes_one_object_with_extra_fields() -> None:
    line = JSONFormatter().format(record_with_extra())
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["message"] == "instance claimed"
    assert (entry["level"], entry["logger"]) == ("info", "app.x")
    assert (entry["instance_id"], entry["attempt"]) == ("abc", 2)


def test_text_formatter_appends_extra_fields() -> None:
    line = TextFormatter().format(record_with_extra())
    assert "app.x: instance claimed" in line
    assert line.endswith("instance_id=abc attempt=2")


def test_text_formatter_keeps_a_users_text_from_forging_lines_or_fields() -> None:
    # Found by an outside audit: an exception's message with a newline printed a second line
    # that read as a log line of its own, and a value with spaces could not be split back.
    forged = "17:00:00 info    laneway.engine.runner: instance completed  instance_id=fake"
    record = logging.LogRecord(
        "laneway.engine.runner", logging.WARNING, __file__, 1, "instance failed", None, None
    )
    record.instance_id = "abc"
    record.error = "RuntimeError: card declined"
    record.note = 'say "x=1"'
    record.traceback = f"Traceback (most recent call last):\nRuntimeError: declined\n{forged}"
    text = TextFormatter().format(record)
    first, *rest = text.split("\n")
    assert first.endswith(
        'instance_id=abc error="RuntimeError: card declined" note="say \\"x=1\\""'
    ), first
    assert rest == [
        "  traceback:",
        "    Traceback (most recent call last):",
        "    RuntimeError: declined",
        f"    {forged}",
    ]
    record.traceback = None
    record.error = f"RuntimeError: card declined\r{forged}"  # a lone carriage return too
    record.msg = "instance\nfailed"
    [line] = TextFormatter().format(record).split("\n")
    assert "instance\\nfailed" in line
    assert r'error="RuntimeError: card declined\r17:00:00' in line
    # And what JSON leaves alone: NEL (a line break to str.splitlines), a C1 CSI, U+2028, a
    # bidi override, DEL and a lone surrogate (an outside audit).
    record.error = "a\x85b \x9b2J \u2028 \u202e \x7f \udc80"
    [line] = TextFormatter().format(record).splitlines()
    assert r'error="a\x85b \x9b2J \u2028 \u202e \x7f \udc80"' in line


def test_configure_logging_uses_json_off_a_terminal() -> None:
    stream = io.StringIO()  # the root logger is restored after each test (tests/conftest.py)
    configure_logging(stream=stream)
    logging.getLogger("app.test").info("hello", extra={"k": 1})
    assert json.loads(stream.getvalue())["k"] == 1


def test_command_logging_says_errors_as_laneway_lines_and_nothing_below() -> None:
    stream = io.StringIO()
    configure_command_logging(stream=stream)
    library = logging.getLogger("laneway.events.backend")
    library.warning("listener connection lost")
    library.error("event hub task crashed", extra={"task": "a\nb"})
    assert stream.getvalue() == "laneway: event hub task crashed  task=a\\nb\n"
