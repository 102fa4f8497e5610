"""LanewayExecutor: objects whose selected fields only read attributes, completed in one pass.

Owns the execution context class of Laneway's schema. graphql-core completes every field of
every object on its own (a path, a resolve info, the resolver, value completion): about 5 µs
per field, so a 50-row page of 15 fields spent most of its time there. When every field
selected on an object is a basic Strawberry field (no resolver, no extensions, no arguments)
of a scalar or enum type, or `__typename`, and no schema extension wraps resolvers, the
object's result is read and coerced here directly, with the same coercion as graphql-core's.
Anything unusual on an object (a null for a non-null field, a value that does not coerce)
sends that object down graphql-core's ordinary path, which reports the error as it always
has. Does not change which fields are selected, or in what order.
"""

from collections.abc import Iterable
from typing import Any, NamedTuple

from graphql import (
    GraphQLEnumType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLScalarType,
    Undefined,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

TYPENAME = "__typename"
MAX_PLANS = 64  # per operation; a subscription's events each bring new field sets


class Read(NamedTuple):
    """How to produce one response key of an object: read and coerce, or a constant."""

    key: str
    attribute: str | None  # None: the constant (the type name)
    read: Any  # Strawberry's default resolver: getattr(source, attribute)
    leaf: GraphQLScalarType | GraphQLEnumType | None
    non_null: bool
    constant: str | None = None


Plan = tuple[Read, ...]


class LanewayExecutor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context, with plain objects completed in one pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Keyed by the identity of a grouped field set, which graphql-core memoizes per
        # request and keeps alive with the plan here, so an id is never reused meanwhile.
        # A subscription's per-event executors share it (they are copies of this one).
        self._plans: dict[tuple[GraphQLObjectType, int], tuple[GroupedFieldSet, Plan | None]] = {}

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        plan = self._plan_of(parent_type, grouped_field_set)
        if plan is not None:
            results = read_object(plan, source_value)
            if results is not None:
                return results
        return super().execute_fields(
            parent_type, source_value, path, grouped_field_set, position_context
        )

    def complete_iterable_value(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> AwaitableOrValue[list[Any]]:
        rows = self._plain_items(item_type, field_details_list, info, path, items, position_context)
        if rows is not None:
            return rows
        return super().complete_iterable_value(
            item_type, field_details_list, info, path, items, position_context
        )

    def _plain_items(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> list[dict[str, Any]] | None:
        """A list of plain objects, each read with the one plan of its selection, or None
        (graphql-core completes the list item by item)."""
        object_type = item_type.of_type if isinstance(item_type, GraphQLNonNull) else item_type
        if (
            position_context is not None
            or not isinstance(object_type, GraphQLObjectType)
            or not isinstance(items, list | tuple)
            or self.get_stream_usage(field_details_list, path) is not None
        ):
            return None
        grouped, defer_usages, _ = self.collect_subfields(object_type, field_details_list)
        plan = None if defer_usages else self._plan_of(object_type, grouped)
        if plan is None:
            return None
        is_type_of = object_type.is_type_of
        rows: list[dict[str, Any]] = []
        for item in items:
            if item is None or (is_type_of is not None and is_type_of(item, info) is not True):
                return None
            row = read_object(plan, item)
            if row is None:
                return None
            rows.append(row)
        return rows

    def _plan_of(self, parent_type: GraphQLObjectType, grouped: GroupedFieldSet) -> Plan | None:
        key = (parent_type, id(grouped))
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            found = (grouped, self._plan(parent_type, grouped))
            self._plans[key] = found
        return found[1]

    def _plan(self, parent_type: GraphQLObjectType, grouped: GroupedFieldSet) -> Plan | None:
        """The reads of an object whose every selected field is plain, else None."""
        reads: list[Read] = []
        for key, details in grouped.items():
            node = details[0].node
            name = node.name.value
            if name == TYPENAME:
                reads.append(Read(key, None, None, None, True, parent_type.name))
                continue
            if node.arguments:
                return None
            field = self.schema.get_field(parent_type, name)
            if field is None or field.args:
                return None
            resolve = field.resolve
            if resolve is None or not getattr(resolve, "_is_default", False):
                return None
            manager = self.middleware_manager
            if manager is not None and manager.get_field_resolver(resolve) is not resolve:
                return None
            definition = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
            if not isinstance(definition, StrawberryField) or not definition.is_basic_field:
                return None
            field_type = field.type
            non_null = isinstance(field_type, GraphQLNonNull)
            leaf = field_type.of_type if isinstance(field_type, GraphQLNonNull) else field_type
            if not isinstance(leaf, GraphQLScalarType | GraphQLEnumType):
                return None
            reads.append(
                Read(key, definition.python_name, definition.default_resolver, leaf, non_null)
            )
        return tuple(reads)


def read_object(plan: Plan, source: Any) -> dict[str, Any] | None:
    """The completed fields of `source`, or None when graphql-core must complete it (it
    then reports what is wrong, as a field error at the right path)."""
    results: dict[str, Any] = {}
    try:
        for key, attribute, read, leaf, non_null, constant in plan:
            if attribute is None:
                results[key] = constant
                continue
            value = read(source, attribute)
            if value is None or value is Undefined:
                if non_null:
                    return None
                results[key] = None
                continue
            if isinstance(value, Exception):
                return None
            assert leaf is not None
            coerced = leaf.coerce_output_value(value)
            if coerced is None or coerced is Undefined:
                return None
            results[key] = coerced
    except Exception:  # graphql-core's own path raises it again, as a located field error
        return None
    return results
