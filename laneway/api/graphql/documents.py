"""Documents: each distinct GraphQL document parsed once, and validated once per schema.

Owns the process's bounded cache of parsed documents, shared by every layer that reads one
(the body and rate-limit middlewares, the websocket handler and the schema), and the schema
extension DocumentCache that serves Strawberry's parse and validation steps from it. A
validation verdict belongs to its document, keyed by the schema and the exact rule classes,
so the depth, alias and token limits judge every request as they would have: the same text
gets the same verdict, a refused document is refused again. Like functools.lru_cache, the
cache is a memo of pure functions, not state; it never holds more than MAX_DOCUMENTS entries
or MAX_CACHED_CHARS characters of text (a parsed document costs up to ~300 bytes per
character), and a document longer than MAX_DOCUMENT_CHARS is parsed every time. Does not
decide what the limits are (schema.py).
"""

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from graphql import (
    ASTValidationRule,
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    parse,
)
from graphql.validation import specified_rules
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

MAX_DOCUMENTS = 1024
MAX_CACHED_CHARS = 128 * 1024
MAX_DOCUMENT_CHARS = 8 * 1024
MAX_VERDICTS = 8  # (schema, rules) pairs remembered per document

Rules = tuple[type[ASTValidationRule], ...]
_SPECIFIED = tuple(specified_rules)  # and what replaces one of them (DocumentCache)


@dataclass(slots=True, eq=False)
class Parsed:
    """One document text's parse: its document or its syntax error, and its verdicts."""

    document: DocumentNode | None
    error: GraphQLError | None
    verdicts: dict[tuple[GraphQLSchema, Rules], list[GraphQLError]] = field(default_factory=dict)


@dataclass(slots=True)
class CacheInfo:
    """What the cache holds, and how often it has been asked (for tests and benchmarks)."""

    parses: int = 0
    hits: int = 0
    validations: int = 0
    entries: int = 0
    chars: int = 0


class _Documents:
    """An LRU of Parsed by (text, max_tokens), bounded in entries and in characters.

    The lock keeps the bookkeeping whole when a host executes the schema from several
    threads; parsing itself runs outside it.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, int | None], Parsed] = OrderedDict()
        self._lock = threading.Lock()
        self.info = CacheInfo()

    def get(self, query: str, max_tokens: int | None) -> Parsed:
        key = (query, max_tokens)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.info.hits += 1
                return entry
            self.info.parses += 1
        try:
            entry = Parsed(parse(query, max_tokens=max_tokens), None)
        except GraphQLError as error:  # graphql-core turns a RecursionError into one too
            entry = Parsed(None, error)
        if len(query) <= MAX_DOCUMENT_CHARS:
            with self._lock:
                if key not in self._entries:
                    self._insert(key, entry)
        return entry

    def _insert(self, key: tuple[str, int | None], entry: Parsed) -> None:
        self._entries[key] = entry
        self.info.entries += 1
        self.info.chars += len(key[0])
        while self.info.entries > MAX_DOCUMENTS or self.info.chars > MAX_CACHED_CHARS:
            (text, _), _ = self._entries.popitem(last=False)
            self.info.entries -= 1
            self.info.chars -= len(text)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.info = CacheInfo()


_documents = _Documents()


def parsed(query: str, max_tokens: int | None) -> DocumentNode | GraphQLError:
    """The document of `query` (shared: never change it), or a copy of its syntax error
    (a document of more than `max_tokens` tokens is one)."""
    entry = _documents.get(query, max_tokens)
    if entry.document is not None:
        return entry.document
    assert entry.error is not None
    return fresh_error(entry.error)


NEED_OPERATION_NAME = "Must provide operation name if query contains multiple operations."


def operation_refusal(query: str, operation_name: str | None, max_tokens: int) -> str | None:
    """Why `query` has no operation to run under `operation_name` (GraphQL's GetOperation: a
    request error), or None: it has one, or it does not parse (its syntax error is reported
    where it is parsed). Strawberry would run the first of several unnamed operations."""
    if operation_name is None and query.count("{") < 2 and "fragment" not in query:
        return None  # one selection set at most, not a fragment's: one operation, or none
    document = parsed(query, max_tokens)
    if isinstance(document, GraphQLError):
        return None
    names = [
        d.name.value if d.name else None
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode)
    ]
    if operation_name is not None:
        return None if operation_name in names else f'Unknown operation named "{operation_name}".'
    if len(names) > 1:
        return NEED_OPERATION_NAME
    return None if names else "Must provide an operation."


def cache_info() -> CacheInfo:
    """A snapshot of the cache's counters."""
    info = _documents.info
    return CacheInfo(info.parses, info.hits, info.validations, info.entries, info.chars)


def clear_cache() -> None:
    """Forget every document and reset the counters (tests)."""
    _documents.clear()


def fresh_error(error: GraphQLError) -> GraphQLError:
    """A copy of a cached error, of the same class, that one request may change (errors.py
    edits messages and extensions in place)."""
    copy = GraphQLError.__new__(type(error))
    GraphQLError.__init__(
        copy,
        error.message,
        error.nodes,
        error.source,
        error.positions,
        error.path,
        error.original_error,
        dict(error.extensions) if error.extensions else None,
    )
    return copy


class DocumentCache(SchemaExtension):
    """A document's limits, and its parse and validation served from the shared cache.

    Sets the token limit (`max_tokens`, or a lower one another extension set) and adds
    `rules` (the depth and alias limits) to the operation's validation rules, as
    MaxTokensLimiter and AddValidationRules would, with each rule that is a key of
    `replacing` replaced by its value (a specified rule by a bounded one), then parses and
    validates, all in one hook: every extension's `on_operation` has run by then, so the
    rules are final, and a verdict set here is what Strawberry and the extensions after this
    one see as the validation's (Strawberry validates only when none is set). Pass the rule
    classes themselves, built once: a verdict is keyed by them. A syntax error is left to
    Strawberry's own parse, which reports it as it always has (it costs at most `max_tokens`
    tokens), and so is a document longer than MAX_DOCUMENT_CHARS. A document someone else
    already set is not touched.
    """

    def __init__(
        self,
        *,
        max_tokens: int | None = None,
        rules: Rules = (),
        replacing: Mapping[type[ASTValidationRule], type[ASTValidationRule]] | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.rules = rules
        self.replacing = replacing or {}

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        options = context.parse_options
        if self.max_tokens is not None:
            options["max_tokens"] = min(options.get("max_tokens", self.max_tokens), self.max_tokens)
        if self.rules or self.replacing:
            context.validation_rules = (
                *(self.replacing.get(rule, rule) for rule in context.validation_rules),
                *self.rules,
            )
        query = context.query
        # A document too long to cache is left to Strawberry whole, parsed once as before.
        if context.graphql_document is None and query and len(query) <= MAX_DOCUMENT_CHARS:
            entry = _documents.get(query, options.get("max_tokens"))
            if entry.document is not None:
                context.graphql_document = entry.document
                if context.pre_execution_errors is None and context.validation_rules:
                    context.pre_execution_errors = verdict(
                        entry, context.schema._schema, context.validation_rules
                    )
        yield


def verdict(entry: Parsed, schema: GraphQLSchema, rules: Rules) -> list[GraphQLError]:
    """The validation errors of a parsed document (none: valid), a fresh copy each time."""
    assert entry.document is not None
    key = (schema, rules)
    errors = entry.verdicts.get(key)
    if errors is None:
        _documents.info.validations += 1
        try:
            errors = validate_document(schema, entry.document, rules)
        except Exception:
            # A limit rule that cannot read a document the specified rules refuse: the depth
            # limiter looks up every fragment spread as it starts, and fails on an unknown
            # one with a KeyError. The specified rules' verdict names what is wrong.
            errors = validate_document(
                schema, entry.document, tuple(r for r in rules if issubclass(r, _SPECIFIED))
            )
            if not errors:
                raise
        if len(entry.verdicts) >= MAX_VERDICTS:
            entry.verdicts.clear()
        entry.verdicts[key] = errors
    return [fresh_error(e) for e in errors]
