"""The enqueue mutations of the GraphQL API: enqueueWorkflow, one instance, and
enqueueWorkflows, a batch of up to MAX_BATCH.

Owns the EnqueueInput input (the arguments of enqueueWorkflow, as an object), how either form
becomes the engine's EnqueueRequest, and the batch's rules beyond the engine's: at most
MAX_BATCH requests a call, and a refused request names its index (`requests[3]: ...`). The
batch is the engine's enqueue_many: all are written in one transaction, or none when a
request is refused, results come in request order, and idempotency and singleton keys
hold per request (a request naming an instance that exists, or one earlier in the same batch,
returns it with created false).
"""

from collections.abc import Mapping
from typing import Annotated, Any

import strawberry
from strawberry.schema.name_converter import NameConverter
from strawberry.types import Info
from strawberry.types.arguments import InputContext, StrawberryArgumentAnnotation
from strawberry.types.base import StrawberryObjectDefinition, get_object_definition
from strawberry.types.unset import UNSET

from laneway.api.graphql.arguments import given
from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.types import JSON, EnqueueResult
from laneway.engine import EnqueueRequest
from laneway.errors import InvalidInputError

MAX_BATCH = 1000  # requests per enqueueWorkflows call

# What each argument of enqueueWorkflow, and each field of EnqueueInput, means.
DESCRIBED = {
    "name": "The name of the workflow to run (BAD_USER_INPUT when none is registered).",
    "params": "Its params, as JSON; BAD_USER_INPUT when the workflow refuses them or they are "
    "too large.",
    "queue": "The queue to run it in (left out or null: the workflow's own queue).",
    "priority": "From -1,000,000 to 1,000,000 (left out or null: 0): a due instance of higher "
    "priority is claimed first in its queue.",
    "delay_ms": "How long to hold it back before it may run, in milliseconds on the database "
    "clock, 0 to 366 days (left out or null: 0).",
    "idempotency_key": "A key of 1 to 255 characters: a later enqueue with the same key returns "
    "the instance this one created (created false) instead of creating another.",
    "singleton_key": "A key of 1 to 255 characters: at most one instance per workflow and key is "
    "not yet terminal; an enqueue while one is returns it (created false).",
    "concurrency_key": "A key of 1 to 255 characters (a tenant, say): its queue's keyConcurrency "
    "and keyRatePerMinute apply per key, and keys take turns for the queue's slots.",
    "version": "The version of the workflow to run on (left out or null: the newest this server "
    "has); BAD_USER_INPUT when this server has no such version.",
}


def described(name: str) -> StrawberryArgumentAnnotation:
    """An enqueueWorkflow argument's declaration, with its description."""
    return strawberry.argument(description=DESCRIBED[name])


@strawberry.input(
    name="EnqueueInput", description="One instance to enqueue, as enqueueWorkflow's arguments."
)
class EnqueueInput:
    name: str = strawberry.field(description=DESCRIBED["name"])
    params: JSON | None = strawberry.field(default=UNSET, description=DESCRIBED["params"])
    queue: str | None = strawberry.field(default=UNSET, description=DESCRIBED["queue"])
    priority: int | None = strawberry.field(default=UNSET, description=DESCRIBED["priority"])
    delay_ms: float | None = strawberry.field(
        default=UNSET, name="delayMs", description=DESCRIBED["delay_ms"]
    )
    idempotency_key: str | None = strawberry.field(
        default=UNSET, name="idempotencyKey", description=DESCRIBED["idempotency_key"]
    )
    singleton_key: str | None = strawberry.field(
        default=UNSET, name="singletonKey", description=DESCRIBED["singleton_key"]
    )
    concurrency_key: str | None = strawberry.field(
        default=UNSET, name="concurrencyKey", description=DESCRIBED["concurrency_key"]
    )
    version: str | None = strawberry.field(default=UNSET, description=DESCRIBED["version"])


def _python_names(definition: StrawberryObjectDefinition) -> dict[str, str]:
    names = NameConverter()
    return {names.from_field(field): field.python_name for field in definition.fields}


_DEFINITION = get_object_definition(EnqueueInput, strict=True)
_PYTHON_NAMES = _python_names(_DEFINITION)


def _enqueue_input(_cls: type, value: Mapping[str, Any], _context: InputContext) -> EnqueueRequest:
    """The engine's request for one EnqueueInput, from graphql-core's coerced value (its fields
    given, as GraphQL names them; a null is the default, as for enqueueWorkflow). Strawberry's
    own conversion resolves each field's type and name again for every request, and an
    EnqueueInput would then be copied into an EnqueueRequest: in a 1,000-request
    enqueueWorkflows the two took more time than the GraphQL layer's coercion and checks
    together. Every field is a scalar that graphql-core has already parsed, so nothing else is
    left to convert."""
    return EnqueueRequest(
        **{_PYTHON_NAMES[key]: item for key, item in value.items() if item is not None}
    )


_DEFINITION.from_input = _enqueue_input


def enqueue_request(
    name: str,
    params: JSON | None = UNSET,
    queue: str | None = UNSET,
    priority: int | None = UNSET,
    delay_ms: float | None = UNSET,
    idempotency_key: str | None = UNSET,
    singleton_key: str | None = UNSET,
    concurrency_key: str | None = UNSET,
    version: str | None = UNSET,
) -> EnqueueRequest:
    """The engine's request for the given arguments (left out or null: the default)."""
    return EnqueueRequest(
        name=name,
        params=given(params),
        queue=given(queue),
        priority=given(priority) or 0,
        delay_ms=given(delay_ms) or 0.0,
        idempotency_key=given(idempotency_key),
        singleton_key=given(singleton_key),
        concurrency_key=given(concurrency_key),
        version=given(version),
    )


async def resolve_enqueue_workflow(
    info: Info[Any, Any],
    name: Annotated[str, described("name")],
    params: Annotated[JSON | None, described("params")] = UNSET,
    queue: Annotated[str | None, described("queue")] = UNSET,
    priority: Annotated[int | None, described("priority")] = UNSET,
    delay_ms: Annotated[float | None, described("delay_ms")] = UNSET,
    idempotency_key: Annotated[str | None, described("idempotency_key")] = UNSET,
    singleton_key: Annotated[str | None, described("singleton_key")] = UNSET,
    concurrency_key: Annotated[str | None, described("concurrency_key")] = UNSET,
    version: Annotated[str | None, described("version")] = UNSET,
) -> EnqueueResult:
    """Create an instance, or return the one its idempotency or singleton key names. A
    concurrencyKey puts it under its queue's caps per key (keyConcurrency, keyRatePerMinute).
    It runs on `version` of the workflow, or else on the newest one this server has."""
    request = enqueue_request(
        name,
        params,
        queue,
        priority,
        delay_ms,
        idempotency_key,
        singleton_key,
        concurrency_key,
        version,
    )
    result = await laneway_of(info.context).services.engine.enqueue(
        request.name,
        request.params,
        queue=request.queue,
        priority=request.priority,
        delay_ms=request.delay_ms,
        idempotency_key=request.idempotency_key,
        singleton_key=request.singleton_key,
        concurrency_key=request.concurrency_key,
        version=request.version,
    )
    return EnqueueResult.from_record(result)


async def resolve_enqueue_workflows(
    info: Info[Any, Any],
    requests: Annotated[
        list[EnqueueRequest],
        strawberry.argument(
            graphql_type=list[EnqueueInput],
            description="The instances to enqueue, at most 1000 (BAD_USER_INPUT beyond).",
        ),
    ],
) -> list[EnqueueResult]:
    """Enqueue up to 1000 instances at once, each as enqueueWorkflow would, in one
    transaction: one refused request refuses the call (its index named) with nothing
    written. Results come in request order; a request whose idempotency
    or singleton key names an instance that exists (or one earlier in this batch) returns it,
    created false."""
    if len(requests) > MAX_BATCH:
        raise InvalidInputError(
            f"requests holds {len(requests)} requests; at most {MAX_BATCH} per call"
        )
    results = await laneway_of(info.context).services.engine.enqueue_many(requests)
    return [EnqueueResult.from_record(result) for result in results]
