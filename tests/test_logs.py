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
