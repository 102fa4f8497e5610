"""RequestContext: what every resolver receives, and get_context, which builds it.

Owns the per-request (per-websocket) view of the process's services and of the caller's
credential. Resolvers take `Info[RequestContext, None]`; nothing reads an untyped dict.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

from starlette.requests import Request
from starlette.websockets import WebSocket
from strawberry.dataloader import DataLoader

from laneway.api.auth import Access, check_bearer
from laneway.config import Settings
from laneway.model import OperationRecord
from laneway.services import Services


@dataclass(slots=True, kw_only=True)
class RequestContext:
    """The services, and the credential the caller presented.

    Not frozen: for a websocket, Strawberry stores the `connection_init` payload in
    `connection_params` once it arrives, and the credential is read from there.
    """

    services: Services
    operations: DataLoader[UUID, list[OperationRecord]]
    authorization: str | None = None
    connection_params: dict[str, object] | None = field(default=None)

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def access(self) -> Access:
        """The caller's credential checked against the configured tokens."""
        credential: object = self.authorization
        if self.connection_params is not None:
            credential = self.connection_params.get("authorization")
        return check_bearer(credential, self.settings.api_tokens)


def services_of(connection: Request | WebSocket) -> Services:
    """The Services the app's lifespan built (Starlette's lifespan state)."""
    services: Services = connection.state.services
    return services


def operations_loader(services: Services) -> DataLoader[UUID, list[OperationRecord]]:
    """Batches the `operations` of every instance in one response into one query.

    Uncached: a websocket keeps its context for its whole life (STACK P15), and operation
    rows change while it lives.
    """

    async def load(instance_ids: Sequence[UUID]) -> list[list[OperationRecord]]:
        found = await services.store.operations_of(instance_ids)
        return [found[instance_id] for instance_id in instance_ids]

    return DataLoader(load_fn=load, cache=False)


async def get_context(connection: Request | WebSocket) -> RequestContext:
    """Build the context of one HTTP request, or of one websocket for its whole life."""
    authorization = None
    if connection.scope["type"] == "http":
        authorization = connection.headers.get("authorization")
    services = services_of(connection)
    return RequestContext(
        services=services, operations=operations_loader(services), authorization=authorization
    )
