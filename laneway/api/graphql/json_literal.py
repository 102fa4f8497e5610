"""The JSON scalar's literals: a GraphQL value written in the document, as the JSON it stands for.

Owns how a variable inside such a literal is read (`params: {a: $x, b: [$x]}`). One the request
does not provide, and that has no default, stands for nothing, as graphql-core's own
replace_variables reads the GraphQL spec for an input object field and a list item: its key is
left out of an object, and it is null in a list. graphql-core's value_from_ast_untyped, which a
scalar without a literal parser gets, put its Undefined there, which then failed to encode
("Object of type UndefinedType is not JSON serializable"). Every other value is read as that
reads it. What a JSON value may hold (its strings, depth, numbers) is input_guard.py's to check.
"""

from collections.abc import Mapping
from typing import Any

from graphql import ListValueNode, ObjectValueNode, ValueNode, VariableNode
from graphql.pyutils import Undefined
from graphql.utilities import value_from_ast_untyped

from laneway.model import JSONValue


def json_literal(node: ValueNode, variables: Mapping[str, Any] | None = None) -> JSONValue:
    """The JSON value of a literal, with the request's (coerced) `variables` where they stand:
    the JSON scalar's `parse_literal`."""
    value = _value(node, variables)
    return None if value is Undefined else value


def _value(node: ValueNode, variables: Mapping[str, Any] | None) -> Any:
    """Undefined for a variable not provided; otherwise the value (of any depth)."""
    if isinstance(node, ObjectValueNode):
        fields = ((field.name.value, _value(field.value, variables)) for field in node.fields)
        return {name: value for name, value in fields if value is not Undefined}
    if isinstance(node, ListValueNode):
        items = (_value(item, variables) for item in node.values)
        return [None if item is Undefined else item for item in items]
    if isinstance(node, VariableNode):
        return (variables or {}).get(node.name.value, Undefined)
    return value_from_ast_untyped(node)
