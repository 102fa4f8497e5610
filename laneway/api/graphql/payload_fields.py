"""Which instance fields are payloads, and whether an operation selects one: what a page of
instances reads from the database besides its ordinary fields.

Owns PAYLOAD_FIELDS (params, result, checkpointInputSchema: up to 256 KiB each, from the jsonb
columns params, result and wait) and selects_payloads, which the list resolvers ask so that a
page reads those columns only when it shows them. Does not read the database, nor count what
an answer costs (result_size.py).
"""

from collections.abc import Sequence
from typing import Any

from strawberry.types import Info
from strawberry.types.nodes import SelectedField, Selection

# The fields' names under Strawberry's default name converter, and in a host's schema that
# keeps Python's names (auto_camel_case off).
PAYLOAD_FIELDS = frozenset({"params", "result", "checkpointInputSchema", "checkpoint_input_schema"})


def selects_payloads(info: Info[Any, Any]) -> bool:
    """Whether the resolver's field selects a payload field anywhere below it (aliases,
    fragments and inline fragments included; a field that @skip or @include leaves out
    counts too, as the result-size estimate counts it: then a page reads what it does not
    show, never the other way round)."""
    return selects_any(info.selected_fields, PAYLOAD_FIELDS)


def selects_any(selections: Sequence[Selection], names: frozenset[str]) -> bool:
    """Whether `selections` ask for a field of one of `names` anywhere below them, fragments
    included (a field that @skip or @include leaves out counts too)."""
    for selection in selections:
        if isinstance(selection, SelectedField) and selection.name in names:
            return True
        if selects_any(selection.selections, names):
            return True
    return False
