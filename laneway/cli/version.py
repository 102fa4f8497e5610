"""`laneway --version`: which release is installed, and the newest migration it ships.

Owns that one line. The version is the installed distribution's (`laneway.__version__`), the
migrations those inside the installation (laneway/migrations/): two installations with the
same newest migration need the same schema (docs/deploying.md#upgrading).
"""

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn


def version_line() -> str:
    """`laneway 0.3.11 (newest migration 0037_…)`: the line --version prints."""
    from laneway import __version__
    from laneway.errors import MigrationsMissingError
    from laneway.store.migrate import migrations

    try:
        newest = f"newest migration {migrations()[-1].name}"
    except MigrationsMissingError:
        newest = "no migration files: an incomplete installation"
    return f"laneway {__version__} ({newest})"


class VersionAction(argparse.Action):
    """`--version`: print version_line() and exit 0 (read only when asked for)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and the newest migration it ships")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(version_line())  # stdout, as argparse's own version action writes
        parser.exit()
