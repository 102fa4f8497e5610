"""LanewayContext: what Laneway's resolvers read, and the hook that builds it.

Owns the per-request (per-websocket) view of the process's services, of the caller's
credential and of the Permission that judges it. In Laneway's own app the GraphQL context is
a LanewayContext; a host application keeps its own context and puts one on it, as attribute
`laneway` (a dataclass or any object) or key "laneway" (a dict):

    laneway=await laneway_context(services, request, permission=my_permission)

Resolvers find it with `laneway_of(info.context)`, whichever of the three it is.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from starlette.requests import HTTPConnection
from strawberry.dataloader import DataLoader

from laneway.api.auth import BearerTokens, Permission
from laneway.config import Settings
from laneway.model import FailureRecord, OperationRecord, WaitingReason
from laneway.services import Services

CONTEXT_KEY = "laneway"


@dataclass(slots=True, kw_only=True)
class LanewayContext:
    """The services, the caller's credential, and the Permission that decides on it.

    Not frozen: for a websocket served by Laneway's own view, Strawberry stores the
    `connection_init` payload in `connection_params` once it arrives, and the credential is
    read from there. (In a host's context Strawberry stores it on the host's context, where
    laneway_of's caller finds it.)
    """

    services: Services
    permission: Permission
    connection: HTTPConnection | None = None
    authorization: str | None = None  # an HTTP request's Authorization header
    connection_params: dict[str, object] | None = None
    _operations: DataLoader[UUID, list[OperationRecord]] | None = field(default=None, init=False)
    _waiting: DataLoader[tuple[UUID, str], WaitingReason | None] | None = field(
        default=None, init=False
    )
    _failures: DataLoader[tuple[UUID, int], list[FailureRecord]] | None = field(
        default=None, init=False
    )

    @property
    def operations(self) -> DataLoader[UUID, list[OperationRecord]]:
        """The operations loader, built when a response first selects `operations` (most
        requests never do): one per context, so one response's loads batch together."""
        if self._operations is None:
            self._operations = operations_loader(self.services)
        return self._operations

    @property
    def waiting_reasons(self) -> DataLoader[tuple[UUID, str], WaitingReason | None]:
        """The waiting-reasons loader, built when a response first selects `waitingReason`:
        a page's reasons come from one query. Uncached, as the operations loader."""
        if self._waiting is None:
            self._waiting = waiting_reasons_loader(self.services)
        return self._waiting

    @property
    def failures(self) -> DataLoader[tuple[UUID, int], list[FailureRecord]]:
        """The failures loader (keys: instance id and limit), built when a response first
        selects `failures`: a page's failures come from one query per limit. Uncached."""
        if self._failures is None:
            self._failures = failures_loader(self.services)
        return self._failures

    @property
    def settings(self) -> Settings:
        return self.services.settings


def operations_loader(services: Services) -> DataLoader[UUID, list[OperationRecord]]:
    """Batches the `operations` of every instance in one response into one query.

    Uncached: Strawberry builds a websocket's context once, for the socket's whole life, and
    operation rows change while it lives; a cache would serve them stale.
    """

    async def load(instance_ids: Sequence[UUID]) -> list[list[OperationRecord]]:
        found = await services.store.operations_of(instance_ids)
        return [found[instance_id] for instance_id in instance_ids]

    return DataLoader(load_fn=load, cache=False)


def waiting_reasons_loader(
    services: Services,
) -> DataLoader[tuple[UUID, str], WaitingReason | None]:
    """Batches the `waitingReason` of every instance in one response into one query, each
    asked with the status shown beside it (None for an instance that has none, or that moved
    to another status meanwhile: it started, ended, or went on to a wait)."""

    async def load(keys: Sequence[tuple[UUID, str]]) -> list[WaitingReason | None]:
        instance_ids = [instance_id for instance_id, _ in keys]
        found = await services.store.waiting_reasons(instance_ids, [s for _, s in keys])
        return [found.get(instance_id) for instance_id in instance_ids]

    return DataLoader(load_fn=load, cache=False)


def failures_loader(services: Services) -> DataLoader[tuple[UUID, int], list[FailureRecord]]:
    """Batches the `failures` of every instance in one response: one query per distinct
    limit (a page asks with one)."""

    async def load(keys: Sequence[tuple[UUID, int]]) -> list[list[FailureRecord]]:
        by_limit: dict[int, list[UUID]] = {}
        for instance_id, limit in keys:
            by_limit.setdefault(limit, []).append(instance_id)
        found = {
            (instance_id, limit): failures
            for limit, ids in by_limit.items()
            for instance_id, failures in (await services.store.failures(ids, limit)).items()
        }
        return [found[key] for key in keys]

    return DataLoader(load_fn=load, cache=False)


async def laneway_context(
    services: Services,
    connection: HTTPConnection | None,
    permission: Permission | None = None,
) -> LanewayContext:
    """The context hook: Laneway's part of the context of one HTTP request, or of one
    websocket for its whole life.

    `connection` is the request or websocket (None: a schema executed inside the process,
    with no credential). `permission` decides who may read and write; None: BearerTokens
    from the settings (LANEWAY_API_TOKENS, LANEWAY_OPEN_READS).
    """
    authorization = None
    if connection is not None and connection.scope["type"] == "http":
        authorization = connection.headers.get("authorization")
    return LanewayContext(
        services=services,
        permission=permission or BearerTokens.from_settings(services.settings),
        connection=connection,
        authorization=authorization,
    )


def laneway_of(context: object) -> LanewayContext:
    """The LanewayContext of a resolver's context: the context itself, its `laneway`
    attribute, or its "laneway" key.

    Raises:
        TypeError: the context carries none (the host forgot the hook); masked for clients.
    """
    if isinstance(context, LanewayContext):
        return context
    found = _entry(context, CONTEXT_KEY)
    if isinstance(found, LanewayContext):
        return found
    raise TypeError(
        f"the GraphQL context ({type(context).__name__}) carries no LanewayContext: set its "
        f"`{CONTEXT_KEY}` to `await laneway_context(services, request)`"
    )


def connection_params_of(context: object) -> Mapping[str, object] | None:
    """The websocket's `connection_init` payload, where Strawberry stored it on `context`:
    a dict's "connection_params" key, or an object's `connection_params` attribute."""
    found = _entry(context, "connection_params")
    return found if isinstance(found, Mapping) else None


def _entry(context: object, name: str) -> object:
    """A dict context's key `name`, or an object context's attribute (None when missing)."""
    if isinstance(context, Mapping):
        return context.get(name)
    return getattr(context, name, None)
