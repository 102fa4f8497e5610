"""What a refused operation says: BearerTokens's refusal names its header, a host's own
Permission's does not (it may want a session or a cookie, and the client would chase a
header the host never reads)."""

import httpx
import pytest

from laneway.api import create_app
from laneway.api.auth import BearerTokens, Caller, Decision, Permission
from tests.api.conftest import TOKEN, make_settings

ENQUEUE = 'mutation { enqueueWorkflow(name: "hello", params: {name: "x"}) { created } }'


class SignInFirst:
    """A host's rule: nobody here is signed in."""

    async def may_read(self, caller: Caller) -> Decision:
        return Decision.UNAUTHENTICATED

    async def may_write(self, caller: Caller) -> Decision:
        return Decision.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("permission", "message"),
    [
        (BearerTokens(tokens=(TOKEN,)), "This operation needs an `Authorization: Bearer` token."),
        (SignInFirst(), "This operation needs authentication."),
    ],
    ids=["bearer tokens", "a host's own"],
)
async def test_an_unauthenticated_refusal_names_a_header_only_when_the_permission_reads_it(
    database_url: str, permission: Permission, message: str
) -> None:
    app = create_app(make_settings(database_url, engine_enabled=False), permission=permission)
    async with app.running():
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            answer = (await http.post("/graphql", json={"query": ENQUEUE})).json()
    (error,) = answer["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert error["message"] == message
