"""What an operation's span records of its document (laneway/api/graphql/spans.py): no value
the client wrote inline, whatever its kind or place, and never more than the caps. The spans
themselves are tested across processes in tests/test_tracing.py."""

import pytest
from graphql import parse, print_ast

from laneway.api.graphql.spans import CUT, MAX_DOCUMENT_CHARS, capped, document_text


@pytest.mark.parametrize(
    "literal",
    ['"hunter2"', '"""hunter2"""', "12345", "1.5e3", "true", "null", "HUNTER2", "[1, 2]",
     '{password: "hunter2", nested: {list: ["x"]}}'],
)  # fmt: skip
def test_every_kind_of_literal_argument_is_a_placeholder(literal: str) -> None:
    document = parse(f"mutation M($p: JSON) {{ a(x: {literal}, y: $p) {{ b }} }}")
    text = document_text(document)
    assert text == 'mutation M($p: JSON) {\n  a(x: "*", y: $p) {\n    b\n  }\n}'


def test_defaults_directives_and_fragments_lose_their_literals_too() -> None:
    source = (
        'query Q($n: Int = 7, $s: String = "hunter2") { ...F @include(if: true) }'
        ' fragment F on Query { a(x: "hunter2") @skip(if: false) }'
    )
    document = parse(source)
    assert document_text(document) == (
        'query Q($n: Int = "*", $s: String = "*") {\n  ...F @include(if: "*")\n}\n\n'
        'fragment F on Query {\n  a(x: "*") @skip(if: "*")\n}'
    )
    # A cached document serves the next request: it is left as it was.
    assert print_ast(document) == print_ast(parse(source))


def test_a_long_document_is_cut_at_the_cap() -> None:
    fields = " ".join(f"field{i}" for i in range(2000))
    text = document_text(parse(f"query {{ {fields} }}"))
    assert len(text) == MAX_DOCUMENT_CHARS
    assert text.endswith(CUT)
    assert text.startswith("{\n  field0\n  field1\n")


@pytest.mark.parametrize(
    ("text", "expected"), [("abc", "abc"), ("abcd", "abcd"), ("abcde", "abc…"), ("", "")]
)
def test_capped_keeps_what_fits_and_marks_a_cut(text: str, expected: str) -> None:
    assert capped(text, 4) == expected
