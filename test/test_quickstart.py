"""The landing page's quickstart runs as written and prints what it promises; the README shows
the same code.
"""

from __future__ import annotations

import ast
import pathlib
import re
import runpy

ROOT = pathlib.Path(__file__).parent.parent
QUICKSTART = ROOT / "docs" / "quickstart.py"


def test_quickstart_runs(capsys):
    namespace = runpy.run_path(str(QUICKSTART), run_name="__main__")
    assert tuple(namespace["batch"].shape) == (4, 24)
    assert namespace["batch"]["is_init"][:, 0].all()
    assert tuple(namespace["rollout"]["advantage"].shape) == (16, 64, 1)
    assert capsys.readouterr().out.splitlines()[-1] == "torch.Size([4, 24]) tensor(True)"


def test_readme_shows_the_quickstart():
    """The README's Python block is docs/quickstart.py without its docstring, ending in a print."""
    source = QUICKSTART.read_text()
    body = ast.parse(source).body
    assert isinstance(body[-1].value, ast.Call) and body[-1].value.func.id == "print"
    lines = source.splitlines()
    code = "\n".join(lines[body[1].lineno - 1 :]).strip()
    (readme_code,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert readme_code.strip() == code
