"""Releases: every one has a version of its own, and a release that ships a new migration has a
new version (CHANGELOG.md names each version's newest migration).

Found by an outside audit: every build was 0.1.0, so `pip install -U new.whl` over an older
install did nothing, and its `laneway migrate` applied nothing new.
"""

import re
import sys
import tomllib

from packaging.requirements import Requirement

import laneway
from laneway.store.migrate import MIGRATION_NAME, migrations
from tests.processes import run_process
from tests.test_cli import ROOT, environment

VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SECTION = re.compile(
    r"^## (?P<version>[0-9]+\.[0-9]+\.[0-9]+)\n(?P<body>.*?)(?=^## |\Z)", re.M | re.S
)
NEWEST = re.compile(r"^Newest migration: `(?P<name>[0-9]{4}_[a-z0-9_]+)`", re.M)


def shipped() -> list[str]:
    """The migrations of the repository's migrations/ folder (what the next wheel ships)."""
    folder = ROOT / "migrations"
    return sorted(p.stem for p in folder.iterdir() if MIGRATION_NAME.fullmatch(p.name))


def releases() -> list[tuple[str, str]]:
    """(version, newest migration) of each section of CHANGELOG.md, newest first."""
    found = []
    for section in SECTION.finditer((ROOT / "CHANGELOG.md").read_text()):
        newest = NEWEST.search(section["body"])
        assert newest, f"CHANGELOG.md's {section['version']} names no `Newest migration: `"
        found.append((section["version"], newest["name"]))
    return found


def test_the_version_names_the_newest_migration_in_the_repository() -> None:
    # A new migration is a new release: a wheel of the same version would be "already
    # installed" over the older one, and the migration would never reach the database.
    (version, newest), *_ = releases()
    assert version == VERSION, f"CHANGELOG.md's first section is {version}, not {VERSION}"
    assert newest == shipped()[-1], (
        f"migrations/ holds {shipped()[-1]}, newer than {newest}, which CHANGELOG.md names for"
        f" {VERSION}: raise the version in pyproject.toml and give it a section naming its"
        " newest migration"
    )


def test_versions_and_their_newest_migrations_only_go_up() -> None:
    history = releases()[::-1]  # oldest first
    numbers = [tuple(int(part) for part in version.split(".")) for version, _ in history]
    assert numbers == sorted(set(numbers)), "each section's version is higher than the last"
    names = [newest for _, newest in history]
    assert names == sorted(names), "no release ships an older newest migration than the last"
    assert set(names) <= set(shipped())


async def test_version_prints_the_installed_version_and_its_newest_migration() -> None:
    code, out, err = await run_process(
        [sys.executable, "-m", "laneway", "--version"], cwd=ROOT, env=environment(None)
    )
    assert (code, err) == (0, "")
    assert out == f"laneway {laneway.__version__} (newest migration {migrations()[-1].name})\n"


def test_every_dependency_range_holds_the_version_the_release_is_tested_with() -> None:
    # The dependencies are ranges (an application installs Laneway beside its own versions);
    # the `pinned` extra is the set the suite runs with (make install, CI, the wheel test, the
    # image). A range that no longer admits its pin, or a dependency with no pin, would ship
    # a combination nobody tested.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = {Requirement(text).name: Requirement(text) for text in project["dependencies"]}
    pins = {
        Requirement(text).name: Requirement(text)
        for text in project["optional-dependencies"]["pinned"]
    }
    unpinned = {"tzdata", "cross-web", "graphql-core"}  # Strawberry's own ranges bound the last two
    assert set(pins) == set(ranges) - unpinned
    for name, pin in pins.items():
        (exact,) = pin.specifier
        assert exact.operator == "==", pin
        assert ranges[name].specifier.contains(exact.version), f"{ranges[name]} lacks {pin}"
        assert pin.marker == ranges[name].marker, name
    assert "laneway[pinned]" in project["optional-dependencies"]["dev"]
