"""The API's refusals of an argument, said with the command line's words for it.

Owns rewording a BAD_USER_INPUT message that names a GraphQL argument (`argument "first" of
workflowInstancesConnection must be ...`, `after is not a cursor from ...`, `each of
filter.statuses must be ...`, the engine's `idempotencyKey must be ...`) with the option or
operand the user typed (`--first must be ...`). The API's own messages are its contract and
stay as they are; the same rewording serves both ways (the database and --url), whose errors
are the API's. Does not check any value itself: the limits are the API's (a server of another
version may have others).
"""

import contextlib
import re
from collections.abc import AsyncIterator, Mapping

from laneway.cli.client import CommandError

# The phrasings of the API's refusals that name an argument (`where`: the argument, with the
# path inside it for an input object or a list: `filter.queue`, `statuses[0]`). The last is
# the engine's, which starts with the bare argument (`idempotencyKey must be 1-255
# characters`, `params is 300021 bytes encoded; ...`, `payload holds a NUL ...`); it is
# reworded only when that first word is one of the command's arguments.
_REFUSALS = (
    re.compile(r'argument "(?P<where>[^"]+)" of \w+ (?P<refusal>.+)', re.DOTALL),
    re.compile(r"each of (?P<where>[\w.]+) (?P<refusal>must .+)", re.DOTALL),
    re.compile(r"(?P<where>after) (?P<refusal>is not a cursor) from workflowInstancesConnection"),
    re.compile(r"(?P<where>[A-Za-z]\w*) (?P<refusal>(?:must|is|holds) .+)", re.DOTALL),
)
_CURSOR_SOURCE = " from `laneway instances` (the --after it names for the next page)"
_INDEX = re.compile(r"\[\d+\]")


def flags(*arguments: str) -> dict[str, str]:
    """The options named after these GraphQL arguments: `delayMs` is --delay-ms."""
    return {name: "--" + re.sub(r"(?<!^)([A-Z])", r"-\1", name).lower() for name in arguments}


def reworded(message: str, options: Mapping[str, str]) -> str | None:
    """`message` with the argument it names said as `options` (argument, or argument path,
    to what the user typed) say it; None when it names none of them."""
    for refusal in _REFUSALS:
        matched = refusal.fullmatch(message)
        if matched is None:
            continue
        where = matched["where"]
        option = options.get(where) or options.get(_INDEX.sub("", where))
        if option is None:
            return None
        if matched["refusal"] == "is not a cursor":
            return f"{option} is not a cursor{_CURSOR_SOURCE}"
        return f"{option} {matched['refusal']}"
    return None


@contextlib.asynccontextmanager
async def option_words(options: Mapping[str, str]) -> AsyncIterator[None]:
    """Within it, a refused argument of `options` is said as the user's option (async: it
    goes in the `async with` that opens the client).

    Raises:
        CommandError: as raised within, reworded when it names an argument of `options`.
    """
    try:
        yield
    except CommandError as exc:
        said = reworded(str(exc), options) if exc.code == "BAD_USER_INPUT" else None
        if said is None:
            raise
        raise CommandError(
            said,
            exc.exit_code,
            code=exc.code,
            retry_after=exc.retry_after,
            changed=exc.changed,
        ) from None
