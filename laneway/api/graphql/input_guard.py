"""InputGuard: one check of every argument of an operation, before any resolver runs.

Owns what an argument may hold beyond its GraphQL type: no NUL and no lone surrogate in any
string (String and ID arguments, their list items and input fields, the strings and keys inside
JSON), a maximum length for String and ID arguments, a range for every number that reaches
PostgreSQL (in a JSON literal: one a double holds), the event-id and instance-id formats, and
the nesting depth of JSON. RULES holds them, keyed by the argument's name, which means the same
thing on every field (a host's own `limit` or `name` gets the same rule). The walk reads the
operation the parser already built: each argument's literal, or the request's value of its
variable (or the variable's default). Anything refused refuses the whole operation with
BAD_USER_INPUT naming the argument, so nothing is written.
Turning a value into what the engine takes stays in arguments.py and the resolvers.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    BooleanValueNode,
    DirectiveNode,
    DocumentNode,
    EnumValueNode,
    FieldNode,
    FloatValueNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLArgument,
    GraphQLError,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLScalarType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    NullValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    ValueNode,
    VariableNode,
    get_named_type,
    get_operation_ast,
)
from graphql.type.introspection import TypeMetaFieldDef
from graphql.validation import ASTValidationRule
from strawberry.extensions import SchemaExtension

from laneway.api.graphql.arguments import parse_event_id, parse_instance_id, parse_parent_id
from laneway.api.graphql.bulk import MAX_TIME_MS
from laneway.api.graphql.errors import coded
from laneway.api.http.strict_json import MAX_JSON_DEPTH, int_out_of_range, out_of_range
from laneway.engine.page_calls import MAX_CURSOR_CHARS, MAX_LIST_LIMIT, MAX_PAGE_SIZE
from laneway.engine.payloads import text_storable
from laneway.engine.queue_calls import MAX_HISTORY_MINUTES
from laneway.engine.requests import (
    MAX_CONCURRENCY,
    MAX_DELAY_MS,
    MAX_KEY_CHARS,
    MAX_RATE_PER_MINUTE,
    MIN_RATE_PER_MINUTE,
    PRIORITY_RANGE,
)
from laneway.errors import InvalidInputError

MAX_ARGUMENT_CHARS = 1000  # any String or ID argument RULES does not name
MAX_NAME_CHARS = 64  # workflow, queue, schedule and entity-type names (names.NAME_PATTERN)
MAX_GRAPHQL_INT = 2**31 - 1
_TEXT_SCALARS = frozenset({"String", "ID"})
_NUMBER_SCALARS = frozenset({"Int", "Float"})
_MAX_INT_LITERAL_DIGITS = 20  # longer cannot be in any range below (and int() stays cheap)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """What one argument may hold beyond its GraphQL type.

    `max_chars` bounds a String or ID; `low`..`high` a number (`low_open`: above `low`, not
    at it); `parse` is a parser from arguments.py that raises InvalidInputError.
    """

    max_chars: int = MAX_ARGUMENT_CHARS
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    parse: Callable[[str], object] | None = None


DEFAULT_RULE = Rule()
_NAME = Rule(max_chars=MAX_NAME_CHARS)
_KEY = Rule(max_chars=MAX_KEY_CHARS)
_RATE = Rule(low=MIN_RATE_PER_MINUTE, high=MAX_RATE_PER_MINUTE)  # check_rate's bounds

RULES: Mapping[str, Rule] = {
    # Strings that reach indexed columns: names are at most 64 characters, keys and entity
    # ids 255 (the engine's own limits), so no btree ever sees a longer one.
    "name": _NAME,
    "queue": _NAME,
    "workflowName": _NAME,
    "entityType": _NAME,
    "version": _NAME,
    "actions": _NAME,
    "stages": _NAME,
    "entityID": _KEY,
    "idempotencyKey": _KEY,
    "singletonKey": _KEY,
    "concurrencyKey": _KEY,
    # Ids: an instance id is a UUID (also where a subscription's resolver would read it only
    # once its stream starts).
    "instanceID": Rule(parse=parse_instance_id),
    "parentID": Rule(parse=parse_parent_id),
    # Numbers that reach PostgreSQL (bigint event ids, integer and double columns, LIMIT).
    "afterEventID": Rule(parse=parse_event_id),
    "limit": Rule(low=1, high=MAX_LIST_LIMIT),
    "offset": Rule(low=0, high=MAX_GRAPHQL_INT),
    "priority": Rule(low=PRIORITY_RANGE[0], high=PRIORITY_RANGE[1]),
    "concurrency": Rule(low=1, high=MAX_CONCURRENCY),
    "keyConcurrency": Rule(low=1, high=MAX_CONCURRENCY),
    "delayMs": Rule(low=0, high=MAX_DELAY_MS),
    "ratePerMinute": _RATE,
    "keyRatePerMinute": _RATE,
    "minutes": Rule(low=1, high=MAX_HISTORY_MINUTES),
    # A bulk action's created window (InstanceFilter): ms since the epoch, to year 9999.
    "createdAfter": Rule(low=0, high=MAX_TIME_MS),
    "createdBefore": Rule(low=0, high=MAX_TIME_MS),
    # workflowInstancesConnection: a page's size, and a cursor (34 characters when it is one).
    "first": Rule(low=1, high=MAX_PAGE_SIZE),
    "after": Rule(max_chars=MAX_CURSOR_CHARS),
}


class _RefusedError(Exception):
    """A value breaks its rule; the walk adds which argument of which field, and where in it
    (`path`: list positions and input fields, outermost first)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []


def _within(refused: _RefusedError, step: str) -> _RefusedError:
    refused.path.insert(0, step)
    return refused


def _text(text: str, rule: Rule | None) -> None:
    """A string as a column can hold it: no NUL, no lone surrogate; at most `max_chars`.

    Raises:
        _RefusedError: it breaks one of those.
    """
    if rule is not None and len(text) > rule.max_chars:
        raise _RefusedError(f"must be at most {rule.max_chars} characters")
    if not text_storable(text):
        raise _RefusedError("must not contain NUL or lone surrogate characters")
    if rule is not None and rule.parse is not None:
        try:
            rule.parse(text)
        except InvalidInputError as exc:
            raise _RefusedError(f"is invalid: {exc}") from None


def _number(value: float, rule: Rule) -> None:
    low, high = rule.low, rule.high
    if low is None or high is None:
        return
    inside = (low < value if rule.low_open else low <= value) and value <= high
    if not inside:  # NaN is never inside
        above = "greater than" if rule.low_open else "at least"
        raise _RefusedError(f"must be {above} {_shown(low)} and at most {_shown(high)}")


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _number_literal(node: IntValueNode | FloatValueNode, rule: Rule) -> None:
    text = node.value
    if isinstance(node, IntValueNode) and len(text) <= _MAX_INT_LITERAL_DIGITS:
        _number(int(text), rule)
    else:
        _number(float(text), rule)  # a huge integer literal becomes inf: out of range
    if isinstance(node, FloatValueNode) and out_of_range(text, float(text)):
        raise _RefusedError("is a number out of range")  # 1e-400 would be read as 0.0


def _nesting(depth: int) -> None:
    """Refuse a list, input object, JSON array or JSON object inside `depth` others when it
    is one level more than MAX_JSON_DEPTH, as strict_json counts a value's levels.

    Raises:
        _RefusedError: nested deeper than MAX_JSON_DEPTH.
    """
    if depth >= MAX_JSON_DEPTH:
        raise _RefusedError(f"is nested deeper than {MAX_JSON_DEPTH} levels")


def _json(value: object, depth: int) -> None:
    """Every string and key of a JSON value (or of any scalar but String, ID, Int, Float)."""
    if isinstance(value, str):
        _text(value, None)
    elif isinstance(value, dict):
        _nesting(depth)
        for key, item in value.items():
            if isinstance(key, str):
                _text(key, None)
            _json(item, depth + 1)
    elif isinstance(value, list):
        _nesting(depth)
        for item in value:
            _json(item, depth + 1)


class _Walk:
    """One operation's arguments checked against `rules` (see check_operation)."""

    __slots__ = ("fragments", "rules", "schema", "variable_defaults", "variables")

    def __init__(
        self,
        schema: GraphQLSchema,
        operation: OperationDefinitionNode,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any] | None,
        rules: Mapping[str, Rule],
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.variables = variables or {}
        self.rules = rules
        self.variable_defaults = {
            definition.variable.name.value: definition.default_value
            for definition in operation.variable_definitions or ()
            if definition.default_value is not None
        }

    def selections(self, root: SelectionSetNode, root_type: GraphQLNamedType) -> None:
        pending: list[tuple[SelectionSetNode, GraphQLNamedType]] = [(root, root_type)]
        seen_fragments: set[str] = set()
        while pending:
            selection_set, parent = pending.pop()
            fields = getattr(parent, "fields", None) or {}
            for node in selection_set.selections:
                if node.directives:
                    self.directives(node.directives)
                if isinstance(node, FieldNode):
                    name = node.name.value
                    field = fields.get(name) or (TypeMetaFieldDef if name == "__type" else None)
                    if field is None:  # __typename, __schema: no arguments
                        continue
                    if node.arguments:
                        self.arguments(node.arguments, field.args, name)
                    if node.selection_set is not None:
                        pending.append((node.selection_set, get_named_type(field.type)))
                elif isinstance(node, InlineFragmentNode):
                    condition = node.type_condition
                    inner = self.schema.get_type(condition.name.value) if condition else parent
                    pending.append((node.selection_set, inner or parent))
                elif isinstance(node, FragmentSpreadNode):
                    fragment_name = node.name.value
                    fragment = self.fragments.get(fragment_name)
                    if fragment is None or fragment_name in seen_fragments:
                        continue  # its type condition is fixed: one walk covers every use
                    seen_fragments.add(fragment_name)
                    inner = self.schema.get_type(fragment.type_condition.name.value)
                    pending.append((fragment.selection_set, inner or parent))

    def directives(self, nodes: tuple[DirectiveNode, ...]) -> None:
        for node in nodes:
            directive = self.schema.get_directive(node.name.value)
            if directive is not None and node.arguments:
                self.arguments(node.arguments, directive.args, "@" + node.name.value)

    def arguments(
        self, nodes: Any, definitions: Mapping[str, GraphQLArgument], field_name: str
    ) -> None:
        for node in nodes:
            name = node.name.value
            definition = definitions.get(name)
            if definition is None:
                continue  # validation refuses it
            try:
                self.value(node.value, definition.type, self.rules.get(name, DEFAULT_RULE), 0)
            except _RefusedError as refused:
                where = name + "".join(refused.path)  # requests[3].idempotencyKey
                message = f'argument "{where}" of {field_name} {refused}'
                raise coded(InvalidInputError(message), node) from None

    def value(self, node: ValueNode, type_: GraphQLInputType, rule: Rule, depth: int) -> None:
        """A literal (or a variable where it stands) as a value of `type_`."""
        if isinstance(node, VariableNode):
            name = node.name.value
            if name in self.variables:
                self.raw(self.variables[name], type_, rule, depth)
                return
            default = self.variable_defaults.get(name)
            if default is not None:
                self.value(default, type_, rule, depth)
            return
        if isinstance(node, NullValueNode | BooleanValueNode | EnumValueNode):
            return
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if isinstance(type_, GraphQLList):
            _nesting(depth)
            items = node.values if isinstance(node, ListValueNode) else (node,)
            for index, item in enumerate(items):
                try:
                    self.value(item, type_.of_type, rule, depth + 1)
                except _RefusedError as refused:
                    raise _within(refused, f"[{index}]") from None
        elif isinstance(type_, GraphQLInputObjectType):
            _nesting(depth)
            if isinstance(node, ObjectValueNode):
                for field in node.fields:
                    definition = type_.fields.get(field.name.value)
                    if definition is not None:
                        inner = self.rules.get(field.name.value, DEFAULT_RULE)
                        try:
                            self.value(field.value, definition.type, inner, depth + 1)
                        except _RefusedError as refused:
                            raise _within(refused, "." + field.name.value) from None
        elif isinstance(type_, GraphQLScalarType) and type_.name in _TEXT_SCALARS:
            if isinstance(node, StringValueNode | IntValueNode):  # an ID may be an integer
                _text(node.value, rule)
        elif isinstance(type_, GraphQLScalarType) and type_.name in _NUMBER_SCALARS:
            if isinstance(node, IntValueNode | FloatValueNode):
                _number_literal(node, rule)
        else:  # a JSON value's levels are its own, wherever the argument holds it
            self.json_literal(node, 0)

    def json_literal(self, node: ValueNode, depth: int) -> None:
        """A JSON literal (or one of any scalar but String, ID, Int, Float), whose variables
        the scalar reads where they stand."""
        if isinstance(node, StringValueNode):
            _text(node.value, None)
        elif isinstance(node, FloatValueNode):  # a variable's, strict_json refused already
            if out_of_range(node.value, float(node.value)):
                raise _RefusedError("holds a number out of range")
        elif isinstance(node, IntValueNode):
            if int_out_of_range(node.value):
                raise _RefusedError("holds a number out of range")
        elif isinstance(node, ListValueNode):
            _nesting(depth)
            for item in node.values:
                self.json_literal(item, depth + 1)
        elif isinstance(node, ObjectValueNode):
            _nesting(depth)
            for field in node.fields:  # field names are GraphQL names: [_A-Za-z0-9]
                self.json_literal(field.value, depth + 1)
        elif isinstance(node, VariableNode):
            name = node.name.value
            if name in self.variables:
                _json(self.variables[name], depth)
            elif (default := self.variable_defaults.get(name)) is not None:
                self.json_literal(default, depth)

    def raw(self, value: object, type_: GraphQLInputType, rule: Rule, depth: int) -> None:
        """A variable's value as the request sent it, as a value of `type_`."""
        if value is None:
            return
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if isinstance(type_, GraphQLList):
            _nesting(depth)
            items = value if isinstance(value, list) else (value,)
            for index, item in enumerate(items):
                try:
                    self.raw(item, type_.of_type, rule, depth + 1)
                except _RefusedError as refused:
                    raise _within(refused, f"[{index}]") from None
        elif isinstance(type_, GraphQLInputObjectType):
            _nesting(depth)
            if isinstance(value, dict):
                for key, item in value.items():
                    definition = type_.fields.get(key)
                    if definition is not None:
                        inner = self.rules.get(key, DEFAULT_RULE)
                        try:
                            self.raw(item, definition.type, inner, depth + 1)
                        except _RefusedError as refused:
                            raise _within(refused, "." + key) from None
        elif isinstance(type_, GraphQLScalarType) and type_.name in _TEXT_SCALARS:
            if isinstance(value, str):
                _text(value, rule)
            elif isinstance(value, int) and not isinstance(value, bool):
                try:
                    digits = str(value)  # an ID sent as a number
                except ValueError:  # longer than Python will write (4300 digits)
                    raise _RefusedError("is too long") from None
                _text(digits, rule)
        elif isinstance(type_, GraphQLScalarType) and type_.name in _NUMBER_SCALARS:
            if isinstance(value, int | float) and not isinstance(value, bool):
                _number(value, rule)
        else:  # a JSON value's levels are its own, wherever the argument holds it
            _json(value, 0)


def check_operation(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    variables: Mapping[str, Any] | None,
    rules: Mapping[str, Rule] = RULES,
) -> None:
    """Check every argument of an operation: literals, variables and their defaults.

    The operation need not be valid (the guard may run before validation): what does not fit
    the schema is skipped, for validation to report.

    Raises:
        GraphQLError: BAD_USER_INPUT naming the first argument refused.
    """
    root_type = schema.get_root_type(operation.operation)
    if root_type is None:
        return
    walk = _Walk(schema, operation, fragments, variables, rules)
    if operation.directives:
        walk.directives(operation.directives)
    walk.selections(operation.selection_set, root_type)


def check_document(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation_name: str | None,
    variables: Mapping[str, Any] | None,
    rules: Mapping[str, Rule] = RULES,
) -> None:
    """check_operation for the operation `operation_name` picks out of `document`.

    Raises:
        GraphQLError: BAD_USER_INPUT naming the first argument refused.
    """
    operation = get_operation_ast(document, operation_name)
    if operation is None:
        return  # no such operation: Strawberry answers that
    definitions = document.definitions
    fragments = (
        {d.name.value: d for d in definitions if isinstance(d, FragmentDefinitionNode)}
        if len(definitions) > 1
        else {}
    )
    check_operation(schema, operation, fragments, variables, rules)


def reporting(refusal: GraphQLError) -> type[ASTValidationRule]:
    """A validation rule that reports `refusal`: a schema extension's answer (this guard's, the
    result size's), given as validation's."""

    class ReportRefusal(ASTValidationRule):
        def enter_document(self, *_: object) -> None:
            self.report_error(refusal)

    return ReportRefusal


class InputGuard(SchemaExtension):
    """Refuse an operation with an argument RULES (or the text rule) refuses, as validation
    refuses an invalid one: no `data` over HTTP, an `error` message (not `next`) over a
    websocket, and no resolver runs. A document that is invalid anyway is answered with its
    validation errors (the refusal among them when validation runs after the guard). Register
    the class (one instance per operation); a host wanting other limits for its own arguments
    subclasses it with its own `rules`.
    """

    rules: Mapping[str, Rule] = RULES

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        # pre_execution_errors is None until validation has run; an extension before this
        # one (a validation cache) may have run it already: [] for a valid document.
        if document is not None and not context.pre_execution_errors:
            try:
                check_document(
                    context.schema._schema,
                    document,
                    context.operation_name,
                    context.variables,
                    self.rules,
                )
            except GraphQLError as refusal:
                # Validation still to come (Strawberry's, or a cache after this one, keyed by
                # the rules) reports the refusal with its own errors; a verdict set already
                # (a cache before this one: valid) is replaced by it.
                context.validation_rules = (*context.validation_rules, reporting(refusal))
                if context.pre_execution_errors is not None:
                    context.pre_execution_errors = [refusal]
        yield
