"""The size of a document with its fragments expanded, counted in linear time, and a limit on it.

Strawberry's depth and alias limiters (QueryDepthLimiter, MaxAliasesLimiter) expand a fragment
spread anew wherever it is spread, as they build: a document whose fragments each spread the
next one twice is a few hundred characters and within every other limit, yet 20 such
fragments kept validation busy for seconds and 30 would for hours (an outside audit), all
before any limit could refuse it. Here each fragment's expanded field count is counted once,
in dependency order (result_size.dependency_order), so the whole document is counted in time
linear in its text; one past MAX_EXPANDED_FIELDS is refused (GRAPHQL_VALIDATION_FAILED) and
those two limiters are not run on it (`guarded`).
"""

from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)
from graphql.validation import ASTValidationRule, ValidationContext

from laneway.api.graphql.result_size import dependency_order, fragments_of

MAX_EXPANDED_FIELDS = 10_000
"""Fields of a document with every spread expanded: far beyond any of Laneway's own clients
(their documents are at most a few hundred fields, and 2,000 tokens hold at most about 2,000
fields without fragments), and the work of the limiters on it stays in milliseconds."""


def expanded_fields(document: DocumentNode) -> int:
    """The fields of `document`'s operations with every fragment spread expanded (a spread that
    closes a cycle counts nothing: validation refuses the cycle itself)."""
    fragments = fragments_of(document)
    sizes: dict[str, int] = {}
    for name in dependency_order(fragments):
        sizes[name] = _count(fragments[name].selection_set, sizes)
    return sum(
        _count(definition.selection_set, sizes)
        for definition in document.definitions
        if isinstance(definition, OperationDefinitionNode)
    )


def _count(selection_set: SelectionSetNode, sizes: dict[str, int]) -> int:
    total = 0
    pending = [selection_set]
    while pending:
        for node in pending.pop().selections:
            if isinstance(node, FieldNode):
                total += 1
                if node.selection_set:
                    pending.append(node.selection_set)
            elif isinstance(node, InlineFragmentNode):
                pending.append(node.selection_set)
            elif isinstance(node, FragmentSpreadNode):
                total += sizes.get(node.name.value, 0)
    return total


def refusal(document: DocumentNode) -> GraphQLError | None:
    """The error for a document that expands past MAX_EXPANDED_FIELDS, else None."""
    size = expanded_fields(document)
    if size <= MAX_EXPANDED_FIELDS:
        return None
    return GraphQLError(
        f"The document expands to {size:,} fields through its fragments, over the maximum"
        f" of {MAX_EXPANDED_FIELDS:,}."
    )


class FragmentExpansionLimit(ASTValidationRule):
    """Refuses a document that expands past MAX_EXPANDED_FIELDS (see the module)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        error = refusal(context.document)
        if error is not None:
            context.report_error(error)


def guarded(rule: type[ASTValidationRule]) -> type[ASTValidationRule]:
    """`rule` (a limiter that does its work as it is built), not built on a document that
    expands past MAX_EXPANDED_FIELDS: FragmentExpansionLimit refuses that one instead."""

    class Guarded(rule):  # type: ignore[valid-type,misc]
        def __init__(self, context: ValidationContext, *args: Any) -> None:
            if refusal(context.document) is not None:
                ASTValidationRule.__init__(self, context)
                return
            super().__init__(context, *args)

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{rule.__name__}"
    return Guarded
