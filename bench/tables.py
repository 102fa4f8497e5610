"""The benchmarks' result tables: aligned columns for a terminal, or Markdown for
docs/performance.md (`--markdown`). Imported by the bench scripts (bench/ is their path)."""

from collections.abc import Sequence


def render(
    header: Sequence[str],
    lines: Sequence[Sequence[str]],
    markdown: bool,
    *,
    numbers: bool = True,
) -> str:
    """`lines` under `header`: Markdown, or columns (the first left-aligned, the rest
    right-aligned as figures, or left-aligned too when they are not `numbers`)."""
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    rows = [header, *lines]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 or not numbers else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )


def print_rows(
    header: Sequence[str], lines: Sequence[Sequence[str]], markdown: bool, *, gap: bool = False
) -> None:
    """Print render(header, lines, markdown); `gap` adds a blank line after the table."""
    print(render(header, lines, markdown))
    if gap:
        print()
