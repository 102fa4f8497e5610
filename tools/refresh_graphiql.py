"""Refresh the GraphiQL files vendored in laneway/api/static/graphiql/ from npm packages.

Run it from the repository root, with npm on the PATH, after changing a version below (and
the versions named in that folder's README.md): `python tools/refresh_graphiql.py`. It
installs the pinned packages into a temporary folder with `npm install --ignore-scripts`
(npm's own registry settings apply), copies their prebuilt browser files in, drops their
source-map comments (the maps are not shipped), and writes the licences: each pinned
package's own, and THIRD_PARTY_LICENSES.txt for every package of the installed tree, since
graphiql.min.js bundles its dependencies. Laneway's own files in that folder (index.html,
start.js, start.css, README.md) are left as they are; any other file there is removed.

Not part of the wheel: the package only ships what this script wrote.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "laneway" / "api" / "static" / "graphiql"

# GraphiQL 3.9.0 is the last release with a UMD build (plain <script> files on globals React,
# ReactDOM and GraphiQL); 4.x and 5.x are ES modules for a bundler or an import map, and 5.x
# runs Monaco in web workers. React 18 is the last React with UMD builds.
PINNED = {
    "graphiql": "3.9.0",
    "@graphiql/plugin-explorer": "3.2.6",
    "react": "18.3.1",
    "react-dom": "18.3.1",
}
# Vendored name -> path inside node_modules.
FILES = {
    "react.production.min.js": "react/umd/react.production.min.js",
    "react-dom.production.min.js": "react-dom/umd/react-dom.production.min.js",
    "graphiql.min.js": "graphiql/graphiql.min.js",
    "graphiql.min.css": "graphiql/graphiql.min.css",
    "plugin-explorer.umd.js": "@graphiql/plugin-explorer/dist/index.umd.js",
    "plugin-explorer.css": "@graphiql/plugin-explorer/dist/style.css",
}
# The pinned packages' own licence files; the explorer plugin ships none, and it is MIT in the
# same repository (graphql/graphiql) as graphiql, whose LICENSE covers it.
LICENSES = {
    "LICENSE.graphiql": "graphiql/LICENSE",
    "LICENSE.react": "react/LICENSE",
    "LICENSE.react-dom": "react-dom/LICENSE",
}
THIRD_PARTY = "THIRD_PARTY_LICENSES.txt"
OURS = frozenset({"index.html", "start.js", "start.css", "README.md"})
SOURCE_MAP = re.compile(r"\n?/[/*]# sourceMappingURL=[^\n]*")
LICENSE_FILE = re.compile(r"^(licen[cs]e|copying)(\.(md|txt))?$", re.IGNORECASE)


def install(folder: Path) -> Path:
    """The node_modules of the pinned packages, installed into `folder`."""
    (folder / "package.json").write_text('{"private": true}\n', encoding="utf-8")
    specs = [f"{name}@{version}" for name, version in PINNED.items()]
    command = ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--save-exact"]
    subprocess.run([*command, *specs], cwd=folder, check=True)
    modules = folder / "node_modules"
    for name, version in PINNED.items():
        installed = json.loads((modules / name / "package.json").read_text(encoding="utf-8"))
        if installed["version"] != version:
            raise SystemExit(f"{name}: npm installed {installed['version']}, not {version}")
    return modules


def is_package_folder(folder: Path) -> bool:
    """node_modules/<name> or node_modules/@scope/<name>, at any depth (not a package's own
    subfolders, which may hold package.json files of their own)."""
    parent = folder.parent
    if parent.name.startswith("@"):
        parent = parent.parent
    return parent.name == "node_modules"


def third_party_licenses(modules: Path) -> str:
    """Every installed package's name, version, declared licence and licence text."""
    entries = []
    for manifest in sorted(modules.glob("**/package.json")):
        package = manifest.parent
        if not is_package_folder(package):
            continue
        data = json.loads(manifest.read_text(encoding="utf-8"))
        if "name" not in data or "version" not in data:
            continue
        texts = [
            path.read_text(encoding="utf-8", errors="replace").strip()
            for path in sorted(package.iterdir())
            if path.is_file() and LICENSE_FILE.match(path.name)
        ]
        declared = data.get("license", "unknown")
        body = "\n\n".join(texts) or f"(The package ships no licence file; it declares {declared}.)"
        entries.append(f"{data['name']}@{data['version']} ({declared})\n\n{body}\n")
    header = (
        "The licences of every npm package installed with "
        + ", ".join(f"{name}@{version}" for name, version in PINNED.items())
        + "\n(tools/refresh_graphiql.py); graphiql.min.js bundles those it uses.\n"
    )
    separator = "\n" + "-" * 79 + "\n\n"
    return header + separator + separator.join(dict.fromkeys(entries))


def refresh() -> None:
    if shutil.which("npm") is None:
        raise SystemExit("npm is not on the PATH")
    with tempfile.TemporaryDirectory() as scratch:
        modules = install(Path(scratch))
        for existing in TARGET.iterdir():
            if existing.name not in OURS:
                existing.unlink()
        for name, source in FILES.items():
            text = (modules / source).read_text(encoding="utf-8")
            (TARGET / name).write_text(SOURCE_MAP.sub("", text).rstrip() + "\n", encoding="utf-8")
        for name, source in LICENSES.items():
            shutil.copyfile(modules / source, TARGET / name)
        (TARGET / THIRD_PARTY).write_text(third_party_licenses(modules), encoding="utf-8")
    total = sum(path.stat().st_size for path in TARGET.iterdir())
    print(f"{TARGET.relative_to(ROOT)}: {total / 1e6:.2f} MB", file=sys.stderr)


if __name__ == "__main__":
    refresh()
