"""What a refused operation says: BearerTokens's refusal names its header, a host's own
Permission's does not (it may want a session or a cookie, and the client would chase a
header the host never reads); /metrics says the same as an operation."""

import httpx
import pytest

from laneway.api import create_app
from laneway.api.auth import BearerTokens, Caller, Decision, Permission
from tests.api.conftest import TOKEN, live_server, make_settings

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


GRAPHQL_RESPONSE = "application/graphql-response+json"


@pytest.mark.parametrize(
    ("permission", "message", "challenge"),
    [
        (
            BearerTokens(tokens=(TOKEN,)),
            "This operation needs an `Authorization: Bearer` token.",
            "Bearer",
        ),
        (SignInFirst(), "This operation needs authentication.", None),
    ],
    ids=["bearer tokens", "a host's own"],
)
async def test_a_metrics_refusal_says_what_an_operation_does_in_the_media_type_asked_for(
    database_url: str, permission: Permission, message: str, challenge: str | None
) -> None:
    # An outside audit: /metrics said "A bearer token is needed" and sent WWW-Authenticate:
    # Bearer under a host's own Permission, always as application/json.
    settings = make_settings(database_url, engine_enabled=False)
    async with live_server(settings, app=create_app(settings, permission=permission)) as server:
        plain = await server.client.get("/metrics")
        preferring = await server.client.get("/metrics", headers={"accept": GRAPHQL_RESPONSE})
    for answer, media_type in ((plain, "application/json"), (preferring, GRAPHQL_RESPONSE)):
        assert answer.status_code == 401, answer.text
        assert answer.headers["content-type"].startswith(media_type)
        assert answer.headers.get("www-authenticate") == challenge
        (error,) = answer.json()["errors"]
        assert error == {"message": message, "extensions": {"code": "UNAUTHENTICATED"}}
