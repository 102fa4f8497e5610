"""Websocket delivery of `workflowEvents` that renders each event once, not once per subscriber.

Owns the graphql-transport-ws handler of the view. A subscription whose document is a single
`workflowEvents` field selecting scalar fields of WorkflowEvent (what dashboards and CLIs send)
takes a direct path: the document is parsed and validated once per text, the arguments are
read exactly as the resolver reads them, and each event's `next` payload is rendered once per
selection and shared by every subscriber with that selection. Anything else (fragments,
directives, nested selections, arguments the input guard or the resolver would reject, a
missing permission) takes Strawberry's ordinary path, so every error is still the schema's own.

Executing the same selection for each of N subscribers made the server's CPU, not the network,
the limit of fan-out (issue #6: ~4,000 deliveries/s flat in N); rendered once, the cost per
delivery is a queue hand-off and one websocket write.
"""

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from graphql import (
    FieldNode,
    GraphQLError,
    GraphQLObjectType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    get_operation_ast,
    validate,
)
from graphql.execution.values import get_argument_values, get_variable_values
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.schema import Schema
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import Operation
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    CompleteMessage,
    ConnectionInitMessage,
    Message,
    SubscribeMessage,
)
from strawberry.types.base import get_object_definition

from laneway.api.auth import Decision
from laneway.api.graphql.arguments import parse_event_id, parse_instance_id
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.documents import operation_refusal, parsed
from laneway.api.graphql.errors import (
    OPERATION_RESOLUTION_FAILURE,
    RATE_LIMITED,
    TIMEOUT,
    public_error,
)
from laneway.api.graphql.input_guard import check_operation
from laneway.api.graphql.permissions import Action, decide
from laneway.api.graphql.schema import MAX_TOKENS
from laneway.api.graphql.types import WorkflowEvent
from laneway.api.http.websocket_limits import OPERATION_IDS, OperationIds
from laneway.api.websocket_results import RequestErrorsAsErrors
from laneway.api.websocket_sends import BoundedSends
from laneway.errors import LanewayError
from laneway.events import EventSelection
from laneway.model import EventRecord
from laneway.store.pool import statements_ended

logger = logging.getLogger(__name__)

ROOT_FIELD = "workflowEvents"
EVENT_TYPE = "WorkflowEvent"
MAX_DOCUMENT_CHARS = 4000  # longer documents go through the ordinary path and its limits
MAX_SELECTIONS = 15  # at most the alias limit of the schema, so no limit is sidestepped
MAX_PLANS = 256  # distinct documents remembered
MAX_RENDERED = 8192  # rendered (event, selection) payloads remembered
SUBSCRIPTION_LIMIT = "Subscription limit reached"  # Strawberry's words, now with a code


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity
class Plan:
    """A validated single-field `workflowEvents` document: what to select and how to name it."""

    operation: OperationDefinitionNode
    field: FieldNode
    root_key: str
    selection: tuple[tuple[str, str], ...]  # (response key, field name)


@dataclass(frozen=True, slots=True)
class EventsArguments:
    """The arguments of one subscription, read as the resolver reads them."""

    instance_id: UUID | None
    name: str | None
    after_event_id: int | None


class EventRenderer:
    """Shared by every connection of a view: plans by document, payloads by event."""

    def __init__(self, schema: Schema) -> None:
        self._schema: GraphQLSchema = schema._schema
        subscription_type = self._schema.subscription_type
        assert subscription_type is not None
        self._root = subscription_type.fields[ROOT_FIELD]
        event_type = self._schema.type_map[EVENT_TYPE]
        assert isinstance(event_type, GraphQLObjectType)
        self._values = _field_readers(schema)
        self._scalar_fields = frozenset(self._values) & {*event_type.fields, "__typename"}
        self._plans: OrderedDict[tuple[str, str | None], Plan | None] = OrderedDict()
        self._rendered: OrderedDict[tuple[int, Plan], str] = OrderedDict()

    def plan(self, query: str, operation_name: str | None) -> Plan | None:
        """The plan of a document that fits the direct path, else None."""
        key = (query, operation_name)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = self._make_plan(query, operation_name)
        self._plans[key] = plan
        if len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)
        return plan

    def _make_plan(self, query: str, operation_name: str | None) -> Plan | None:
        if len(query) > MAX_DOCUMENT_CHARS:
            return None
        document = parsed(query, MAX_TOKENS)
        if isinstance(document, GraphQLError) or len(document.definitions) != 1:
            return None
        operation = document.definitions[0]
        if not isinstance(operation, OperationDefinitionNode):
            return None
        if operation.operation != OperationType.SUBSCRIPTION or operation.directives:
            return None
        if operation_name is not None and (
            operation.name is None or operation.name.value != operation_name
        ):
            return None
        roots = operation.selection_set.selections
        if len(roots) != 1 or not isinstance(roots[0], FieldNode):
            return None
        field = roots[0]
        if field.name.value != ROOT_FIELD or field.directives or field.selection_set is None:
            return None
        selection: list[tuple[str, str]] = []
        for node in field.selection_set.selections:
            if not isinstance(node, FieldNode) or node.directives or node.arguments:
                return None
            if node.selection_set is not None or node.name.value not in self._scalar_fields:
                return None
            selection.append(((node.alias or node.name).value, node.name.value))
        if len(selection) > MAX_SELECTIONS or validate(self._schema, document):
            return None
        return Plan(
            operation=operation,
            field=field,
            root_key=(field.alias or field.name).value,
            selection=tuple(selection),
        )

    def arguments(self, plan: Plan, variables: Mapping[str, Any] | None) -> EventsArguments | None:
        """The subscription's arguments, or None when the input guard (input_guard.py) or the
        resolver would answer with an error."""
        coerced = get_variable_values(
            self._schema, plan.operation.variable_definitions or (), dict(variables or {})
        )
        if isinstance(coerced, list):  # variable errors: the ordinary path reports them
            return None
        try:
            check_operation(self._schema, plan.operation, {}, variables)
            given = get_argument_values(self._root, plan.field, coerced)
            instance = given.get("instanceID")
            after = given.get("afterEventID")
            return EventsArguments(
                instance_id=parse_instance_id(instance) if instance is not None else None,
                name=given.get("name"),
                after_event_id=parse_event_id(after) if after is not None else None,
            )
        except (GraphQLError, LanewayError):
            return None

    def render(self, event: EventRecord, plan: Plan) -> str:
        """The `next` payload of `event` for `plan`, rendered once for all its subscribers."""
        key = (event.event_id, plan)
        text = self._rendered.get(key)
        if text is None:
            shown = WorkflowEvent.from_record(event)
            values = {
                response_key: self._values[field_name](shown)
                for response_key, field_name in plan.selection
            }
            text = json.dumps({"data": {plan.root_key: values}}, allow_nan=False)
            self._rendered[key] = text
            if len(self._rendered) > MAX_RENDERED:
                self._rendered.popitem(last=False)
        return text


def _field_readers(schema: Schema) -> dict[str, Callable[[WorkflowEvent], object]]:
    """GraphQL field name → how to read it from a WorkflowEvent (plus __typename)."""
    definition = get_object_definition(WorkflowEvent, strict=True)
    converter = schema.config.name_converter
    readers: dict[str, Callable[[WorkflowEvent], object]] = {
        "__typename": lambda _: EVENT_TYPE,
    }
    for field in definition.fields:
        python_name = field.python_name

        def read(event: WorkflowEvent, attribute: str = python_name) -> object:
            return getattr(event, attribute)

        readers[converter.get_graphql_name(field)] = read
    return readers


class LanewayTransportWSHandler(RequestErrorsAsErrors):
    """graphql-transport-ws with the direct path for single-field `workflowEvents` documents
    (and a query's or mutation's request errors as `error` messages: websocket_results.py).

    The context is Laneway's own or a host's carrying one (graphql/context.py); the direct
    path asks the same Permission as the subscription field would (permissions.decide).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.websocket, ASGIWebSocketAdapter):  # what runs, for WebSocketLimits
            operation_ids = self.websocket.ws.scope.get(OPERATION_IDS)
            if isinstance(operation_ids, OperationIds):
                operation_ids.running = self.operations
        # Every send and close of this connection, bounded: a client that stops reading is
        # dropped (websocket_sends.py) and its operations end.
        self._sends = BoundedSends(self.websocket, on_drop=self._end_operations)
        self.websocket = self._sends

    async def _end_operations(self) -> None:
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)

    async def handle_task_exception(self, error: Exception) -> None:
        """Strawberry's, but a client that went away while an operation was still sending to
        it (a replay cut short, a tab closed) has done nothing wrong: not logged, where
        Strawberry logs it as "Exception in worker task" with a traceback."""
        if not isinstance(error, WebSocketDisconnected):
            await super().handle_task_exception(error)

    async def handle_message(self, message: Message) -> None:
        """Strawberry's, with a frame that is JSON but not an object (`[1]`, `null`) closed
        with 4400 as any other bad frame is; Strawberry's own fails on it and drops the
        socket without a close code."""
        frame: object = message  # as decoded: any JSON value
        if not isinstance(frame, dict):
            await self.handle_invalid_message("Failed to parse message")
            return
        await super().handle_message(message)

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        """Strawberry's, but a null payload, which graphql-transport-ws allows, is taken as
        none (Strawberry's closed the socket with 4400)."""
        if message.get("payload", {}) is None:
            message = {"type": "connection_init"}
        await super().handle_connection_init(message)

    async def handle_complete(self, message: CompleteMessage) -> None:
        """Strawberry's, but a `complete` whose `id` is not a non-empty string closes the socket
        with 4400 and says why (graphql-transport-ws: a message of a format it does not
        specify), where Strawberry's looks any id up among its operations: a list or object
        there crashed the connection without a close code, a number was ignored."""
        problem = id_problem("complete", message)
        if problem is not None:
            await self.handle_invalid_message(problem)
            return
        await super().handle_complete(message)

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        """Strawberry's, but a `subscribe` that breaks graphql-transport-ws (subscribe_problem)
        closes the socket with 4400 and says why, as the protocol asks, where Strawberry's
        fails on it (a crash that drops the socket without a close code, or an operation
        that never answers and keeps its place among the socket's 20); an operation over
        the socket's limit of operations at once is refused with RATE_LIMITED (a limit on
        how much one client does at once, as the rate limit's refusal of a subscribe is;
        Strawberry's own error has no code), and a
        document without the operation it names, or with several and no name, is answered
        as any request error is, with an `error` message for that id (graphql-transport-ws)
        and the code HTTP gives it, OPERATION_RESOLUTION_FAILURE, where Strawberry would
        close the socket and every other operation on it (or run the first of several)."""
        problem = subscribe_problem(message)
        if problem is not None:
            await self.handle_invalid_message(problem)
            return
        payload: object = message.get("payload")
        if self.connection_acknowledged and message.get("id") not in self.operations:
            limit = self.max_subscriptions_per_connection
            if limit is not None and len(self.operations) >= limit:
                error = {
                    "id": message["id"],
                    "type": "error",
                    "payload": [
                        {"message": SUBSCRIPTION_LIMIT, "extensions": {"code": RATE_LIMITED}}
                    ],
                }
                await self.send_message(error)  # type: ignore[arg-type]
                return
            query = payload.get("query") if isinstance(payload, dict) else None
            name = payload.get("operationName") if isinstance(payload, dict) else None
            if isinstance(query, str) and isinstance(name, str | None):
                refusal = operation_refusal(query, name, MAX_TOKENS)
                if refusal is not None:
                    error = {
                        "id": message["id"],
                        "type": "error",
                        "payload": [
                            {
                                "message": refusal,
                                "extensions": {"code": OPERATION_RESOLUTION_FAILURE},
                            }
                        ],
                    }
                    await self.send_message(error)  # type: ignore[arg-type]
                    return
        await super().handle_subscribe(message)

    async def run_operation(self, operation: Operation[Any, Any]) -> None:
        """The direct path when the document fits it, else Strawberry's. Whatever happens,
        the operation ends with a message and leaves the socket's operations: one that
        failed before its stream started (a host's Permission that raised, say) would
        otherwise end in silence, its exception swallowed by Strawberry's task callback,
        and keep its place among the socket's 20 for good."""
        try:
            try:
                direct = await self._direct_route(operation)
            except Exception as exc:
                await self._fail(operation, exc)
                return
            if direct is None:
                await self._run_timed(operation)
                return
            try:
                await self._deliver(operation, *direct)
            except WebSocketDisconnected:
                return
            except Exception as exc:
                # The hub failed under the stream (a crashed task; a database that is away
                # only delays it, events/catch_up.py): the client resubscribes with its last
                # event id.
                await self._fail(operation, exc)
                return
            with suppress(WebSocketDisconnected):
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
        finally:
            if self.operations.get(operation.id) is operation:
                self.forget_id(operation.id)

    async def _direct_route(
        self, operation: Operation[Any, Any]
    ) -> tuple[EventRenderer, Plan, EventsArguments] | None:
        """What the direct path needs for `operation`, or None for the ordinary path."""
        renderer: EventRenderer | None = getattr(self.view, "event_renderer", None)
        if renderer is None:
            return None
        plan = renderer.plan(operation.query, operation.operation_name)
        if plan is None or not await self._may_read():
            return None
        arguments = renderer.arguments(plan, operation.variables)
        return None if arguments is None else (renderer, plan, arguments)

    async def _fail(self, operation: Operation[Any, Any], error: Exception) -> None:
        """Logged once here (a refused argument is the client's, not logged); the client sees
        its code, SERVICE_UNAVAILABLE or the masked message, as on the ordinary path."""
        if not isinstance(error, LanewayError):
            logger.error("event stream failed", exc_info=error, extra={"operation": operation.id})
        final = {"id": operation.id, "type": "error", "payload": [public_error(error)]}
        with suppress(WebSocketDisconnected):
            await operation.send_operation_message(final)  # type: ignore[arg-type]

    async def _run_timed(self, operation: Operation[Any, Any]) -> None:
        """Strawberry's path; a query or mutation under the same deadline as over HTTP."""
        seconds = laneway_of(self.context).settings.operation_timeout_seconds
        if not seconds or _kind(operation.query, operation.operation_name) not in _TIMED:
            await super().run_operation(operation)
            return
        deadline = asyncio.timeout(seconds)
        try:
            async with statements_ended(), deadline:  # as over HTTP (http/deadline.py)
                await super().run_operation(operation)
        except TimeoutError:
            if not deadline.expired():
                raise
            logger.warning("operation timed out", extra={"seconds": seconds})
            message = f"The operation took longer than {seconds:g} s."
            final: dict[str, Any] = {
                "id": operation.id,
                "type": "error",
                "payload": [{"message": message, "extensions": {"code": TIMEOUT}}],
            }
            with suppress(WebSocketDisconnected):
                await operation.send_operation_message(final)  # type: ignore[arg-type]

    async def _may_read(self) -> bool:
        """Refused callers take the ordinary path, where the field's permission answers."""
        return await decide(self.context, Action.READ) is Decision.ALLOW

    async def _deliver(
        self,
        operation: Operation[Any, Any],
        renderer: EventRenderer,
        plan: Plan,
        arguments: EventsArguments,
    ) -> None:
        prefix = '{"id":' + json.dumps(operation.id) + ',"type":"next","payload":'
        matches = EventSelection(arguments.instance_id, arguments.name)
        async with laneway_of(self.context).services.hub.open_stream(
            after_event_id=arguments.after_event_id, matches=matches
        ) as events:
            async for event in events:
                if operation.completed:
                    return
                await self._send_text(prefix + renderer.render(event, plan) + "}")

    async def _send_text(self, text: str) -> None:
        await self._sends.send_text(text)


_TIMED = (OperationType.QUERY, OperationType.MUTATION)
_ABSENT = object()
_OPTIONAL_FIELDS = (
    ("variables", dict, "an object"),
    ("operationName", str, "a string"),
    ("extensions", dict, "an object"),
)


def subscribe_problem(message: Mapping[str, object]) -> str | None:
    """Why a `subscribe` message is not one graphql-transport-ws allows, else None.

    The protocol's shape: `id` a non-empty string, `payload` an object whose `query` is a
    string, whose `variables` and `extensions` are objects and whose `operationName` is a
    string, each of these three null or absent if not given. The words follow the reference
    server's (graphql-ws) and fit a close reason uncut (websocket_sends.close_reason).
    """
    problem = id_problem("subscribe", message)
    if problem is not None:
        return problem
    payload = message.get("payload", _ABSENT)
    if not isinstance(payload, dict):
        return _expected("subscribe", "'payload' to be an object", payload)
    query = payload.get("query", _ABSENT)
    if not isinstance(query, str):
        return _expected("subscribe", "'query' to be a string", query)
    for name, kind, described in _OPTIONAL_FIELDS:
        value = payload.get(name)
        if value is not None and not isinstance(value, kind):
            return _expected("subscribe", f"'{name}' to be {described}", value)
    return None


def id_problem(message_type: str, message: Mapping[str, object]) -> str | None:
    """Why the `id` of a `subscribe` or `complete` message is not the non-empty string
    graphql-transport-ws asks for, else None."""
    operation_id = message.get("id", _ABSENT)
    if not isinstance(operation_id, str):
        return _expected(message_type, "'id' to be a string", operation_id)
    return None if operation_id else f"\"{message_type}\" message requires a non-empty 'id'"


def _expected(message_type: str, what: str, value: object) -> str:
    return f'"{message_type}" message expects {what}, got {_json_type(value)}'


def _json_type(value: object) -> str:
    if value is _ABSENT:
        return "nothing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _kind(query: str, operation_name: str | None) -> OperationType | None:
    """The operation's type, or None when the document does not parse (Strawberry then
    answers with the parse error at once)."""
    document = parsed(query, MAX_TOKENS)
    if isinstance(document, GraphQLError):
        return None
    operation = get_operation_ast(document, operation_name)
    return operation.operation if operation is not None else None
