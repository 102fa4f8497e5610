"""What a server's answer must hold before a command reads it: the fields its document selects.

Owns checking the `data` of an answer over --url against the selection of the document it
answers: every selected field is there, a field with a selection of its own holds an object
(a list of them: OBJECT_LISTS), and is null only where the schema lets it be
(NULLABLE_OBJECTS). A
server that is not Laneway, or not of a version this CLI knows, is then one line, not a
KeyError's traceback in the middle of a command. Leaf values are not checked: their types
are the server's word. Answers of the database mode come from the schema itself, unchecked.
"""

import functools
from collections.abc import Mapping
from typing import TypeAlias

# The object fields of the CLI's documents that the schema lets be null: an unknown instance,
# and an instance that waits for nothing. Every other one is non-null (a test keeps this so).
NULLABLE_OBJECTS = frozenset({"workflowInstance", "waitingReason"})
# The object fields of the CLI's documents that hold a list of objects (never null, nor any
# item of them); every other one holds one object. The same test keeps this so.
OBJECT_LISTS = frozenset(
    {
        "workflows",
        "queues",
        "deployPreflight",
        "edges",
        "queueHistory",
        "workers",
        "versions",
        "schedules",
        "events",
    }
)

Selection: TypeAlias = dict[str, "Selection | None"]
"""Response keys (an alias, else the field's name) and what each selects (None: a leaf)."""


@functools.cache
def selection(document: str) -> Selection:
    """What the (first) operation of `document` selects, field by field."""
    from graphql import FieldNode, OperationDefinitionNode, SelectionSetNode, parse

    def fields(selections: SelectionSetNode) -> Selection:
        chosen: Selection = {}
        for node in selections.selections:
            assert isinstance(node, FieldNode), "the CLI's documents use no fragments"
            key = (node.alias or node.name).value
            chosen[key] = fields(node.selection_set) if node.selection_set else None
        return chosen

    operation = next(
        d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode)
    )
    return fields(operation.selection_set)


def lacking(document: str, data: object) -> str | None:
    """Where `data` does not hold what `document` selects ("bulk.matched", "queues[0].counts"),
    or None when it holds it all."""
    return _lacking(selection(document), data, "")


def _lacking(wanted: Selection, value: object, path: str) -> str | None:
    if not isinstance(value, Mapping):
        return path or "data"
    for key, inner in wanted.items():
        where = f"{path}.{key}" if path else key
        if key not in value:
            return where
        found = value[key]
        if inner is None or (found is None and key in NULLABLE_OBJECTS):
            continue
        if key not in OBJECT_LISTS:
            if (wrong := _lacking(inner, found, where)) is not None:
                return wrong
            continue
        if not isinstance(found, list):
            return where
        for index, item in enumerate(found):
            if (wrong := _lacking(inner, item, f"{where}[{index}]")) is not None:
                return wrong
    return None
