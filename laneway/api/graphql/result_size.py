"""Result size: the worst-case cost of an operation's answer, estimated before anything runs.

Owns the estimate and its cap, MAX_COST. Every value the answer can hold counts 1 (a field, an
object, a list item), and a field computed by an async resolver (a read of the database: every
root field but `workflows`, an instance's waitingReason, failures, operations and events)
counts RESOLVER_COST more, since one such read costs what a hundred or more plain values do.
A JSON value (an instance's params, result and checkpointInputSchema, a schedule's params)
counts PAYLOAD_COST more: it may hold 256 KiB (engine/payloads.py), what about 2,000 plain
values of about 130 bytes weigh, so the cap bounds an answer's payloads to about 31 MiB (124
JSON values at their largest), while a page of the default size (50 instances) with their
params and results fits. Counted 1, 510 instances with their
params and results (estimated about 1,500) answered 256 MB, five aliases of them 1.28 GB.
A long text counts, the same way, what it may hold in plain values of VALUE_BYTES (LONG_TEXTS,
by type and field): a failure's traceback (8,000 characters, about 62 more) and message
(4,000, 31), an instance's lastError (4,000) and progress message (500, 4), an event's error
(4,000) and an operation's error (2,000, 16). Counted 1, 500 instances' pages of 130
failures with their tracebacks could answer about 500 MB.
Each counts once for every item of the lists around it. A list's size is its size argument
(SIZE_ARGUMENTS: `limit`, `first`, `minutes`; `requests`, by its length), as a literal or a
variable's value, else the argument's default, else its largest; a connection's `first`
sizes its `edges`; a list that no argument sizes (queues, workers, an instance's operations)
counts UNSIZED_LIST items. Fragments count where they are spread, aliases each, a field
selected twice twice; `@skip` and `@include` are not read (the worst case), and introspection
fields, which read no data and are off where GraphiQL is, count 1.

Checked twice, so a refusal comes before any resolver: ResultSizeLimit, a validation rule that
DocumentCache (documents.py) judges once per document, counts a variable at its smallest (one
item, no requests), so what it refuses is over the cap for any variables; ResultSizeGuard, a
schema extension, counts the operation about to run with the request's variables when it
has any. Both refuse with a validation error (GRAPHQL_VALIDATION_FAILED, errors.py) that
names the estimate and the cap. Which limits a schema takes is schema.py's.
"""

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from graphql import (
    ArgumentNode,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    NullValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValueNode,
    VariableNode,
    get_operation_ast,
)
from graphql.language.visitor import SKIP, VisitorAction
from graphql.validation import ASTValidationRule, ValidationContext
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

from laneway.api.graphql.input_guard import RULES, reporting
from laneway.engine.context import MAX_REPORT_MESSAGE_CHARS
from laneway.engine.failures import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS
from laneway.engine.operation_attempt import MAX_REASON_CHARS
from laneway.engine.payloads import MAX_PAYLOAD_BYTES

MAX_COST = 250_000
RESOLVER_COST = 100
# A JSON value at its largest (MAX_PAYLOAD_BYTES, 256 KiB) in plain values of about 130 bytes
# (a field's name, its value, the punctuation around them, and the objects that build it):
# as large as lets a default page (50 instances) hold its params and results under MAX_COST.
PAYLOAD_COST = 2_000
VALUE_BYTES = MAX_PAYLOAD_BYTES // PAYLOAD_COST  # the plain value PAYLOAD_COST counts in (131)


def _text_cost(chars: int) -> int:
    return -(-chars // VALUE_BYTES)


# An output text that may be long, by (type, field), at its largest in plain values: counted
# as a JSON value is, so it weighs what it may hold wherever it is selected.
LONG_TEXTS: Mapping[tuple[str, str], int] = {
    ("AttemptFailure", "traceback"): _text_cost(MAX_TRACEBACK_CHARS),
    ("AttemptFailure", "message"): _text_cost(MAX_MESSAGE_CHARS),
    ("WorkflowInstanceStatus", "lastError"): _text_cost(MAX_MESSAGE_CHARS),
    ("WorkflowInstanceStatus", "message"): _text_cost(MAX_REPORT_MESSAGE_CHARS),
    ("WorkflowEvent", "error"): _text_cost(max(MAX_MESSAGE_CHARS, MAX_REASON_CHARS)),
    ("WorkflowOperation", "error"): _text_cost(MAX_REASON_CHARS),
}
UNSIZED_LIST = 20
# Arguments that size the list a field returns (the same on every field, as in RULES): by
# their value, at most what the input guard allows; `requests` by its length.
SIZE_ARGUMENTS: Mapping[str, int] = {
    name: int(high) for name in ("limit", "first", "minutes") if (high := RULES[name].high)
}
LENGTH_ARGUMENTS = frozenset({"requests"})
JSON_SCALAR = "JSON"  # the name of scalars.JSON, strawberry's, in any schema that takes it
_MAX_INT_DIGITS = 20

Linear = tuple[int, int]
"""A selection set's cost as `a + b * m`: `m` is the size of its lists that no argument of
their own sizes (a connection's `first` for its `edges`, else UNSIZED_LIST)."""

Variable = Callable[[str], object]
"""A variable's value by name; LOWEST when it is not known (validation)."""

LOWEST = object()


class _Estimate:
    """The costs of a document's operations, its fragments each walked once."""

    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: Mapping[str, FragmentDefinitionNode],
        variable: Variable,
    ) -> None:
        self.schema = schema
        self.variable = variable
        self.fragments: dict[str, Linear] = {}
        for name in dependency_order(fragments):
            fragment = fragments[name]
            condition = schema.get_type(fragment.type_condition.name.value)
            if condition is not None:
                self.fragments[name] = self.selections(fragment.selection_set, condition)

    def operation(self, operation: OperationDefinitionNode) -> int:
        root = self.schema.get_root_type(operation.operation)
        if root is None:
            return 0
        a, b = self.selections(operation.selection_set, root)
        return a + b * UNSIZED_LIST

    def selections(self, selection_set: SelectionSetNode, parent: GraphQLNamedType) -> Linear:
        a = b = 0
        fields: Mapping[str, GraphQLField] = getattr(parent, "fields", None) or {}
        for node in selection_set.selections:
            if isinstance(node, FieldNode):
                name = node.name.value
                field = fields.get(name)
                if field is None:  # __typename, introspection, or unknown (validation's)
                    a += 1 if name.startswith("__") else 0
                    continue
                fixed, per_item = self.field(node, field, parent.name)
                a += fixed
                b += per_item
            elif isinstance(node, InlineFragmentNode):
                condition = node.type_condition
                inner = self.schema.get_type(condition.name.value) if condition else parent
                if inner is not None:
                    inline_a, inline_b = self.selections(node.selection_set, inner)
                    a += inline_a
                    b += inline_b
            elif isinstance(node, FragmentSpreadNode):
                spread_a, spread_b = self.fragments.get(node.name.value, (0, 0))
                a += spread_a
                b += spread_b
        return a, b

    def field(self, node: FieldNode, field: GraphQLField, parent: str) -> Linear:
        """One field's cost, as a field of the type named `parent`: fixed, and per item of its
        parent's unsized lists (when it is one of them)."""
        own = 1 + (RESOLVER_COST if _resolved(field) else 0)
        size = self.size(node.arguments or (), field)
        levels, named = _lists(field.type)
        below = 0
        if node.selection_set is not None:
            inner_a, inner_b = self.selections(node.selection_set, named)
            below = inner_a + inner_b * (size if levels == 0 and size is not None else UNSIZED_LIST)
        elif _payload(named):
            below = PAYLOAD_COST  # per JSON value: once, or per item of a list of them
        else:
            below = LONG_TEXTS.get((parent, node.name.value), 0)
        if levels == 0:
            return own + below, 0
        item = 1 + below
        for _ in range(levels - 1):
            item = 1 + UNSIZED_LIST * item
        return (own + size * item, 0) if size is not None else (own, item)

    def size(self, arguments: tuple[ArgumentNode, ...], field: GraphQLField) -> int | None:
        """The size a field's arguments give its list, or None when none does."""
        given = {argument.name.value: argument.value for argument in arguments}
        for name, definition in field.args.items():
            if name in SIZE_ARGUMENTS:
                high = SIZE_ARGUMENTS[name]
                default = definition.default_value
                fallback = default if isinstance(default, int) and 1 <= default <= high else high
                return self.count(given.get(name), fallback, high)
            if name in LENGTH_ARGUMENTS:
                return self.length(given.get(name))
        return None

    def count(self, node: ValueNode | None, fallback: int, high: int) -> int:
        value: object = None
        if isinstance(node, VariableNode):
            value = self.variable(node.name.value)
            if value is LOWEST:
                return 1
        elif isinstance(node, IntValueNode):
            text = node.value
            value = int(text) if len(text) <= _MAX_INT_DIGITS else high
        if isinstance(value, float) and math.isfinite(value):
            value = int(value)  # an Int variable may be sent as 500.0
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, 1), high)
        return fallback  # absent, null, or not a number (refused before anything runs)

    def length(self, node: ValueNode | None) -> int:
        if isinstance(node, VariableNode):
            value = self.variable(node.name.value)
            if value is LOWEST:
                return 0
            return len(value) if isinstance(value, list) else int(value is not None)
        if isinstance(node, ListValueNode):
            return len(node.values)
        return 0 if node is None or isinstance(node, NullValueNode) else 1


def _resolved(field: GraphQLField) -> bool:
    """Whether a field is computed by an async resolver of its own: a read of the database."""
    definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    return isinstance(definition, StrawberryField) and definition.is_async


def _payload(named: GraphQLNamedType) -> bool:
    """Whether values of this type are JSON: up to MAX_PAYLOAD_BYTES each."""
    return isinstance(named, GraphQLScalarType) and named.name == JSON_SCALAR


def _lists(type_: GraphQLOutputType) -> tuple[int, GraphQLNamedType]:
    """How many lists a field's type nests, and the type of what they hold."""
    levels = 0
    while True:
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if not isinstance(type_, GraphQLList):
            return levels, type_
        levels += 1
        type_ = type_.of_type


def _spreads(selection_set: SelectionSetNode) -> Iterator[str]:
    pending = [selection_set]
    while pending:
        for node in pending.pop().selections:
            if isinstance(node, FragmentSpreadNode):
                yield node.name.value
            elif isinstance(node, FieldNode | InlineFragmentNode) and node.selection_set:
                pending.append(node.selection_set)


def dependency_order(fragments: Mapping[str, FragmentDefinitionNode]) -> list[str]:
    """The fragments, each after those it spreads (without recursion: a chain of fragments
    may be long). A spread that closes a cycle, which validation refuses, is left out."""
    order: list[str] = []
    state: dict[str, bool] = {}  # False: being visited; True: placed
    for start in fragments:
        if start in state:
            continue
        state[start] = False
        stack = [(start, _spreads(fragments[start].selection_set))]
        while stack:
            name, spreads = stack[-1]
            following = next((s for s in spreads if s in fragments and s not in state), None)
            if following is None:
                stack.pop()
                state[name] = True
                order.append(name)
            else:
                state[following] = False
                stack.append((following, _spreads(fragments[following].selection_set)))
    return order


def fragments_of(document: DocumentNode) -> dict[str, FragmentDefinitionNode]:
    return {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}


def refusal(operation: OperationDefinitionNode, cost: int) -> GraphQLError | None:
    """The error of an operation whose estimated cost is over MAX_COST, or None."""
    if cost <= MAX_COST:
        return None
    name = f"Operation '{operation.name.value}'" if operation.name else "The operation"
    return GraphQLError(
        f"{name} has an estimated cost of {cost:,}, over the maximum of {MAX_COST:,}; ask for"
        " smaller pages (limit, first), fewer nested lists or fewer JSON fields (params,"
        " result) and long texts (traceback, lastError) per page.",
        operation,
    )


def _unknown(_: str) -> object:
    return LOWEST


class ResultSizeLimit(ASTValidationRule):
    """Refuse every operation of a document whose cost is over MAX_COST whatever its
    variables are: each variable counted at its smallest."""

    def enter_document(self, node: DocumentNode, *_args: Any) -> VisitorAction:
        context = self.context
        assert isinstance(context, ValidationContext)  # a rule of an executable document
        estimate = _Estimate(context.schema, fragments_of(node), _unknown)
        for definition in node.definitions:
            if isinstance(definition, OperationDefinitionNode):
                error = refusal(definition, estimate.operation(definition))
                if error is not None:
                    self.report_error(error)
        return SKIP


def operation_cost(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation: OperationDefinitionNode,
    variables: Mapping[str, Any] | None,
) -> int:
    """An operation's estimated cost with these variables (one left out counts at its
    default); `variables` None: each at its smallest, as ResultSizeLimit counts them."""
    if variables is None:
        return _Estimate(schema, fragments_of(document), _unknown).operation(operation)
    defaults = {
        definition.variable.name.value: definition.default_value
        for definition in operation.variable_definitions or ()
        if definition.default_value is not None
    }

    def variable(name: str) -> object:
        if name in variables:
            return variables[name]
        default = defaults.get(name)
        if isinstance(default, IntValueNode) and len(default.value) <= _MAX_INT_DIGITS:
            return int(default.value)
        if isinstance(default, ListValueNode):
            return list(default.values)
        return None

    return _Estimate(schema, fragments_of(document), variable).operation(operation)


class ResultSizeGuard(SchemaExtension):
    """Refuse the operation about to run when, with the request's variables, its cost is over
    MAX_COST: as validation refuses it, so nothing runs. An operation without variables was
    judged whole by ResultSizeLimit. Register it after the input guard, whose refusal of an
    argument out of range comes first."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and not context.pre_execution_errors:
            operation = get_operation_ast(document, context.operation_name)
            if operation is not None and operation.variable_definitions:
                schema = context.schema._schema
                cost = operation_cost(schema, document, operation, context.variables or {})
                error = refusal(operation, cost)
                if error is not None:
                    # Validation still to come reports it with its own errors; a verdict
                    # already given (valid: a cache before this one) is replaced by it.
                    context.validation_rules = (*context.validation_rules, reporting(error))
                    if context.pre_execution_errors is not None:
                        context.pre_execution_errors = [error]
        yield
