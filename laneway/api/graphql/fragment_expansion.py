"""The size of a document with its fragments expanded, counted in linear time, and a limit on it.

Strawberry's depth and alias limiters (QueryDepthLimiter, MaxAliasesLimiter) expand a fragment
spread anew wherever it is spread, as they build: a document whose fragments each spread the
next one twice is a few hundred characters and within every other limit, yet 20 such
fragments kept validation busy for seconds and 30 would for hours (an outside audit), all
before any limit could refuse it. Here each fragment's expanded field count is counted once,
in dependency order (result_size.dependency_order), so the whole document is counted in time
linear in its text; one past MAX_EXPANDED_FIELDS is refused (GRAPHQL_VALIDATION_FAILED) and
those two limiters are not run on it (`guarded`).

Also bounds the one specified rule whose work is not linear in the text: checking that the
fields sharing a response name can be merged (OverlappingFieldsCanBeMergedRule) compares
them in pairs. graphql-core stops it after a budget of 500,000 comparisons, about a fifth
of a second of the event loop here, so one client within its rate limit could stall the
server with ~1,900 copies of one field made new by a comment (an outside audit).
BoundedFieldMerging is that rule with a budget of MAX_MERGE_WORK, and a message that says
what to change.
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
from graphql.validation import (
    ASTValidationRule,
    OverlappingFieldsCanBeMergedRule,
    ValidationContext,
)
from graphql.validation.validate import ValidationAbortedError

from laneway.api.graphql.result_size import dependency_order, fragments_of

MAX_EXPANDED_FIELDS = 10_000
"""Fields of a document with every spread expanded: far beyond any of Laneway's own clients
(their documents are at most a few hundred fields, and 2,000 tokens hold at most about 2,000
fields without fragments), and the work of the limiters on it stays in milliseconds."""

MAX_MERGE_WORK = 50_000
"""BoundedFieldMerging's budget, in graphql-core's units (about a comparison of two fields of
one response name each): every document Laneway's own clients send spends none, 40
fragments spread in one selection, each selecting the same four fields and a list of two,
spend about 17,000; a selection of ~220 copies of one field spends it all. Spent, it costs
a few milliseconds beside the linear checks of a 2,000-token document."""


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


class BoundedFieldMerging(OverlappingFieldsCanBeMergedRule):
    """OverlappingFieldsCanBeMergedRule within MAX_MERGE_WORK, refusing a document past it
    with a message that says what to change (graphql-core's is "Validation aborted.")."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        self.rule_context.remaining_complexity_budget = MAX_MERGE_WORK

    def enter_selection_set(self, *args: Any) -> None:
        try:
            super().enter_selection_set(*args)
        except ValidationAbortedError:
            raise ValidationAbortedError(
                "The document takes too much work to validate: its fields that share a"
                f" response name need over {MAX_MERGE_WORK:,} comparisons to check that they"
                " can be merged. Select each field once in a selection set, and spread each"
                " fragment once."
            ) from None
