"""The GraphQL/HTTP surface of Laneway: Starlette app, Strawberry schema, auth and limits."""

from laneway.api.app import create_app

__all__ = ["create_app"]
