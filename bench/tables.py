"""The benchmarks' result tables: aligned columns for a terminal, or Markdown for
docs/performance.md (`--markdown`). Imported by the bench scripts (bench/ is their path)."""

from collections.abc import Sequence


def print_rows(
    header: Sequence[str], lines: Sequence[Sequence[str]], markdown: bool, *, gap: bool = False
) -> None:
    """Print `lines` under `header`: Markdown, or columns (the first left-aligned, the rest
    right-aligned); `gap` adds a blank line after the table."""
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        rows = [header, *lines]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            print(
                "  ".join(
                    cell.ljust(w) if i == 0 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(row, widths, strict=True))
                )
            )
    if gap:
        print()
