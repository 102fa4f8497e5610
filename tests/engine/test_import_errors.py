"""The line that says why a workflow module failed while importing names the module's own line,
also when what raised was a library the module called (the standard library's or an installed
package's), as it does when Laneway refused what the module made."""

import sys
from pathlib import Path

import pytest

from laneway.engine.registry import WorkflowRegistry
from laneway.errors import InvalidInputError


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # json.loads raises inside json/decoder.py, in the standard library
        ("bad_json_at_import", "import json\n\nVALUE = json.loads('{')\n", "JSONDecodeError"),
        # httpx raises inside its own package, installed beside Laneway
        ("bad_url_at_import", "import httpx\n\nURL = httpx.URL('http://[::1')\n", "InvalidURL"),
    ],
)
def test_the_line_named_is_the_modules_own_not_the_librarys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, expected: str
) -> None:
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(InvalidInputError) as raised:
        WorkflowRegistry.from_modules([module])
    message = str(raised.value)
    assert message.startswith(f"workflow module {module!r} failed while importing: {expected}")
    assert message.endswith(f"({tmp_path / module}.py, line 3)")
