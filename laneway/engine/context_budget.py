"""The cap on a template's context, and the room a stage run has left in it (pure, no I/O).

A template's context becomes its result (`{"context": ..., "next_instance_id": ...}`) and its
next workflow's params, JSON payloads capped at payloads.MAX_PAYLOAD_BYTES: so the context is
capped, that they fit, and the write that would take it past the cap is refused where it is
made (an operation's data, a resume's input), not when the instance completes. ContextBudget
keeps an upper bound of the context's encoded size, raised by each datum's encoded size as it
merges, and encodes the context itself only when that bound passes the cap (merged keys may
replace others, so the bound may be high). Where stage_run.py applies it: there.
"""

import sys
import uuid
from collections.abc import Mapping, Sequence

from laneway.engine.context import PermanentFailure
from laneway.engine.failures import StageFailure
from laneway.engine.payloads import MAX_PAYLOAD_BYTES, encode_json, json_size
from laneway.engine.template import Template
from laneway.errors import InvalidInputError
from laneway.model import JSONValue

_ENVELOPE_BYTES = len(encode_json({"context": {}}, what="result")) - len("{}")
_CHAINED_ENVELOPE_BYTES = len(
    encode_json({"context": {}, "next_instance_id": str(uuid.UUID(int=0))}, what="result")
) - len("{}")
"""What a template's result adds around its context, without and with a next workflow."""


class ContextTooLargeError(PermanentFailure, StageFailure):
    """A template's context grew past its cap (a resume's input made it so, or data merged
    from several operations at once): final, since a retry would meet the same context."""


def context_cap(template: Template) -> int:
    """The most bytes the encoded context of `template` may take: its result, and its next
    workflow's params (the context overlaid with `next_params`), fit the payload cap then."""
    if template.next_workflow is None:
        return MAX_PAYLOAD_BYTES - _ENVELOPE_BYTES
    try:
        overlay = (
            json_size(encode_json(dict(template.next_params), what="next_params"))
            if template.next_params
            else 0
        )
    except InvalidInputError:  # refused when the next workflow is enqueued, as it always was
        overlay = 0
    return MAX_PAYLOAD_BYTES - max(_CHAINED_ENVELOPE_BYTES, overlay)


def encoded_size(context: Mapping[str, JSONValue]) -> int:
    """The size of `context` encoded as the engine stores it."""
    value = context if isinstance(context, dict) else dict(context)
    return json_size(encode_json(value, what="context", max_bytes=sys.maxsize))


def input_room(context: Mapping[str, JSONValue], label: str, cap: int) -> int:
    """The most bytes a resume's input may take encoded, merged into `context` under the
    checkpoint's `label`, for the context to stay within `cap` (exact: the encoded key and
    its separators are counted; an input under a label the context has replaces its value)."""
    rest = {key: value for key, value in context.items() if key != label}
    key_bytes = len(encode_json(label, what="checkpoint label")) + len(":") + (1 if rest else 0)
    return max(cap - encoded_size(rest) - key_bytes, 0)


def refusal(size: int, cap: int) -> str:
    """An operation attempt's failure reason: its data would take the context past the cap."""
    return (
        f"data refused: with it the context would be {size} bytes encoded, over the {cap}-byte "
        "cap of a template's context (its result)"
    )


class ContextBudget:
    """The room left in the context of one stage run, as data merges into it.

    Operations of a parallel pass see the context as the pass found it; the data of siblings
    accepted meanwhile (`in_pass`) counts too. Not safe across tasks that run at once: each
    check and its acceptance happen with no await between them.
    """

    __slots__ = ("_bound", "_in_pass", "_measured_in_pass", "_parallel", "cap")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._bound: int | None = None  # of the context's encoded size; None: not known yet
        self._parallel = False
        self._in_pass: list[Mapping[str, JSONValue]] = []
        self._measured_in_pass = False

    def refuses(
        self, context: Mapping[str, JSONValue], data: Mapping[str, JSONValue], data_bytes: int
    ) -> int | None:
        """The size the context would have with `data` (of `data_bytes` encoded) merged into
        `context` (what the operation saw), when that passes the cap; else None, and the data
        counts as merged from now on."""
        if not data:
            return None
        if self._bound is None:
            self._bound = encoded_size(self._merged(context))
            self._measured_in_pass = self._parallel
        if self._bound + data_bytes <= self.cap:
            self._bound += data_bytes  # merging adds at most the data's own size
        else:
            size = encoded_size(self._merged(context, data))
            if size > self.cap:
                return size
            self._bound = size
            self._measured_in_pass = self._parallel
        if self._parallel:
            self._in_pass.append(data)
        return None

    def check(self, context: Mapping[str, JSONValue], what: str, stage: str) -> None:
        """Raise when `context` passes the cap: the stage's context as the data counted since
        it was last measured (or forget()) left it. `what` names the cause in the message.

        Raises:
            ContextTooLargeError: it does.
        """
        size = self._bound if self._bound is not None else encoded_size(context)
        if size > self.cap:
            size = encoded_size(context)  # the bound may be high: the exact size decides
        if size > self.cap:
            raise ContextTooLargeError(
                f"stage {stage!r}: the context is {size} bytes encoded {what}, over the "
                f"{self.cap}-byte cap of a template's context (its result)",
                stage=stage,
                operation=None,
            )
        self._bound = size

    def forget(self) -> None:
        """The context changed by what was not counted (the data of earlier passes): the next
        check measures it."""
        self._bound = None

    def reused(self, data: Mapping[str, JSONValue]) -> None:
        """`data` (a reused row's) joins the context uncounted: the next check measures it, in
        a parallel pass with this data, which merges only at the pass's end."""
        self._bound = None
        if self._parallel:
            self._in_pass.append(data)

    def start_pass(self, parallel: bool) -> None:
        self._parallel, self._in_pass = parallel, []

    def end_pass(self) -> None:
        # A parallel pass merges in position order, not in the order its data was counted: a
        # sum of sizes bounds the context either way, a size measured in that order may not.
        if self._measured_in_pass:
            self._bound = None
        self._parallel, self._in_pass, self._measured_in_pass = False, [], False

    def _merged(
        self, context: Mapping[str, JSONValue], *data: Mapping[str, JSONValue]
    ) -> Mapping[str, JSONValue]:
        extra: Sequence[Mapping[str, JSONValue]] = (*self._in_pass, *data)
        if not extra:
            return context
        merged = dict(context)
        for item in extra:
            merged.update(item)
        return merged
