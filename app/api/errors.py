"""Error codes of the GraphQL API: one table from error class to `extensions.code`.

Owns what a client sees when something goes wrong. Domain errors (app/errors.py) get their
code here; UNAUTHENTICATED and FORBIDDEN are the API layer's own. Anything else is masked
as "Unexpected error." and logged once with its traceback (schema.py).
"""

from graphql import GraphQLError

from app.engine import LockUnavailableError
from app.errors import ConflictError, InvalidInputError, LanewayError, NotFoundError

MASKED_MESSAGE = "Unexpected error."

ERROR_CODES: dict[type[LanewayError], str] = {
    NotFoundError: "NOT_FOUND",
    InvalidInputError: "BAD_USER_INPUT",
    ConflictError: "CONFLICT",
    LockUnavailableError: "CONFLICT",
}


class APIError(GraphQLError):
    """An error of the API layer itself, raised with its code already attached."""

    code = "INTERNAL_SERVER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"code": self.code})


class UnauthenticatedError(APIError):
    """The request carries no credentials, and this operation needs them."""

    code = "UNAUTHENTICATED"


class ForbiddenError(APIError):
    """The request's credentials do not allow this operation."""

    code = "FORBIDDEN"


def code_for(error: BaseException | None) -> str | None:
    """The public code of an exception, or None when it must be masked."""
    if isinstance(error, GraphQLError):
        code = (error.extensions or {}).get("code")
        return code if isinstance(code, str) else None
    for cls in type(error).__mro__:
        if cls in ERROR_CODES:
            return ERROR_CODES[cls]
    return None


def is_expected(error: GraphQLError) -> bool:
    """True for errors a client may see as they are.

    An error without an original exception comes from parsing or validation (including the
    depth, alias and token limits); a GraphQLError raised on purpose, or a mapped
    LanewayError, is deliberate. Anything else is an internal fault.
    """
    original = error.original_error
    if original is None or isinstance(original, GraphQLError):
        return True
    return code_for(original) is not None


def add_code(error: GraphQLError) -> None:
    """Attach `extensions.code` to an error raised as a mapped LanewayError."""
    code = code_for(error.original_error)
    if code is not None and not isinstance(error.original_error, GraphQLError):
        error.extensions = {**(error.extensions or {}), "code": code}
