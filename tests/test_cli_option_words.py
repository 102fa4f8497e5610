"""The API's refusals of an argument, said with the CLI's option (laneway/cli/option_words.py):
pure cases, and the commands both ways (the database and --url). The API's own words stay.

Exit code: 2, as before; only the words change.
"""

import json
from pathlib import Path

import pytest

from laneway.cli.client import EXIT_FAILED, EXIT_USAGE, CommandError
from laneway.cli.option_words import flags, option_words, reworded
from tests.cli_ways import both_ways, ways

OPTIONS = {
    **flags("first", "after", "delayMs", "ratePerMinute"),
    "name": "NAME",
    "statuses": "--filter status=",
    "filter.concurrencyKey": "--filter key=",
}


def test_flags_are_the_arguments_in_kebab_case() -> None:
    assert flags("first", "delayMs", "keyRatePerMinute") == {
        "first": "--first",
        "delayMs": "--delay-ms",
        "keyRatePerMinute": "--key-rate-per-minute",
    }


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (
            'argument "first" of workflowInstancesConnection must be at least 1 and at most 500',
            "--first must be at least 1 and at most 500",
        ),
        (
            'argument "ratePerMinute" of configureQueue must be at least 0.0001 and at most 1e9',
            "--rate-per-minute must be at least 0.0001 and at most 1e9",
        ),
        ('argument "name" of queueHistory must be at most 64 characters', "NAME must be at most"),
        (
            'argument "filter.concurrencyKey" of cancelWorkflows must be at most 255 characters',
            "--filter key= must be at most 255 characters",
        ),
        ('argument "statuses[1]" of x must be at most 64 characters', "--filter status= must"),
        ("each of statuses must be one of pending, running", "--filter status= must be one of"),
        (
            "after is not a cursor from workflowInstancesConnection",
            "--after is not a cursor from `laneway instances`",
        ),
    ],
)
def test_a_refused_argument_is_said_as_its_option(message: str, said: str) -> None:
    assert (reworded(message, OPTIONS) or "").startswith(said)


@pytest.mark.parametrize(
    "message",
    [
        'argument "priority" of enqueueWorkflow must be at least 0',  # not one of OPTIONS
        "queue name must be 1-64 letters, digits or _ . : - (got '')",  # names no argument
        "before is not a cursor from workflowInstancesConnection",
    ],
)
def test_a_message_that_names_none_of_the_options_is_left_as_it_is(message: str) -> None:
    assert reworded(message, OPTIONS) is None


async def test_only_bad_user_input_is_reworded_and_the_rest_is_kept() -> None:
    message = 'argument "first" of workflowInstancesConnection must be at least 1'
    with pytest.raises(CommandError) as raised:
        async with option_words(OPTIONS):
            raise CommandError(message, EXIT_USAGE, code="BAD_USER_INPUT", retry_after=2.0)
    assert (str(raised.value), raised.value.exit_code) == ("--first must be at least 1", 2)
    assert (raised.value.code, raised.value.retry_after) == ("BAD_USER_INPUT", 2.0)
    with pytest.raises(CommandError, match=r"^argument"):
        async with option_words(OPTIONS):
            raise CommandError(message, EXIT_FAILED, code="INTERNAL_SERVER_ERROR")


@both_ways
async def test_commands_name_the_option_the_api_refused(way: str, database_url: str) -> None:
    long = "q" * 100
    async with ways(way, database_url) as laneway:
        for args, says in (
            (("instances", "--first", "501"), "--first must be at least 1 and at most 500"),
            (("configure-queue", "q", "--concurrency", "0"), "--concurrency must be at least 1"),
            (("queue-history", long), "NAME must be at most 64 characters"),
            (("enqueue", "hello", "--priority", "9999999999"), "--priority must be at least"),
            (("enqueue", "hello", "--version", long), "--version must be at most 64 characters"),
            (("cancel", "--filter", f"queue={long}", "--dry-run"), "--filter queue= must be"),
            (("disable-schedule", long), "NAME must be at most 64 characters"),
        ):
            code, _, err = await laneway(*args)
            assert code == 2, err
            assert err.startswith(f"laneway: {says}"), err


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("idempotencyKey must be 1-255 characters", "--idempotency-key must be 1-255 characters"),
        ("concurrencyKey must not contain NUL", "--concurrency-key must not contain NUL"),
        ("params is 300021 bytes encoded; the limit is 262144", "--params is 300021 bytes"),
        ("payload holds a NUL character or a lone surrogate", "--payload holds a NUL"),
        ("delayMs must be between 0 and 1e9", "--delay-ms must be between 0 and 1e9"),
    ],
)
def test_an_engine_refusal_that_starts_with_the_argument_is_said_as_its_option(
    message: str, said: str
) -> None:
    options = flags("idempotencyKey", "concurrencyKey", "params", "payload", "delayMs")
    assert (reworded(message, options) or "").startswith(said)


@both_ways
async def test_enqueue_and_signal_name_the_option_of_a_refused_key_or_payload(
    way: str, database_url: str, tmp_path: Path
) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"text": "x" * 300_000}))
    hello = ("enqueue", "hello", "--params", '{"name": "e"}')
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway(*hello)
        assert code == 0, err
        instance = json.loads(out)["instanceID"]
        for args, says in (
            ((*hello, "--idempotency-key", ""), "--idempotency-key must be 1-255 characters"),
            ((*hello, "--singleton-key", ""), "--singleton-key must be 1-255 characters"),
            ((*hello, "--concurrency-key", ""), "--concurrency-key must be 1-255 characters"),
            (("enqueue", "review", "--params", f"@{big}"), "--params is 300"),
            (("signal", instance, "approve", "--idempotency-key", ""), "--idempotency-key must"),
            (("signal", instance, "approve", "--payload", f"@{big}"), "--payload is 300"),
        ):
            code, _, err = await laneway(*args)
            assert code == 2, err
            assert err.startswith(f"laneway: {says}"), err
            assert err.count("\n") == 1, err
