"""Packaging: the wheel declares version ranges and installs next to the torch a user already has.

The wheel is built from a copy of the sources (``pip wheel --no-build-isolation``, offline) and
installed, with no package index at all, into a new virtual environment (``venv --without-pip``)
that already "holds" this interpreter's torch, torchrl, tensordict, warp-lang, numba and numpy:
a ``.pth`` file makes a folder of links to this interpreter's installed distributions (all but
torchrl_ext) visible to it, so its pip sees them as installed. Had pip wanted another torch,
it would have had nowhere to get it from and failed.
"""

from __future__ import annotations

import ast
import email
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import torch
from released_names import needs_released_names

ROOT = Path(__file__).resolve().parents[1]

#: What the build reads (pyproject.toml names README.md and LICENSE; setup.py is a shim), and the
#: examples beside them, as in a clone, which the wheel must leave out.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "torchrl_ext", "examples")

#: Entries of the parent site-packages the new environment must not see: our own package (an
#: editable install of it would make the check vacuous), its finder and .pth files (not
#: processed from a linked folder anyway). pip and setuptools come from the parent too (torch
#: requires setuptools>=77, newer than what ``venv`` seeds).
HIDDEN = re.compile(r"^(torchrl_ext|__editable__)([-_.].*)?$|\.pth$", re.IGNORECASE)

#: Ranges the wheel must declare for the heavy dependencies (never exact pins).
RANGES = {
    "torch": ">=2.14",
    "torchrl": "<0.15,>=0.14.1",
    "tensordict": "<0.15,>=0.14.3",
    "warp-lang": "<2,>=1.19",
}

PROBE = """
import importlib.util, json, os, sys
import torch
spec = importlib.util.find_spec("torchrl_ext")
out = {
    "torch_version": torch.__version__,
    "torch_file": os.path.realpath(torch.__file__),
    "torchrl_ext_file": None if spec is None else spec.origin,
}
if spec is not None:
    import torchrl_ext
    from torchrl_ext import Sequence
    out["sequence"] = Sequence(length=4, burn_in=2, layout="batch_time").length
print(json.dumps(out))
"""


def _clean_env() -> dict[str, str]:
    """The environment without this session's pip settings and import paths."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }


def _run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_clean_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--isolated", "--no-deps", "--no-index"]
        + ["--no-build-isolation", "-q", "-w", wheels, src],
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("torchrl_ext-*.whl")
    return wheel


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def _fresh_venv_seeing_this_torch(tmp_path: Path) -> tuple[Path, Path]:
    """A new venv whose sys.path ends with links to this interpreter's installed packages."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).stdout.strip()
    )
    parent = Path(torch.__file__).resolve().parents[1]
    shadow = tmp_path / "parent-site-packages"
    shadow.mkdir()
    for entry in parent.iterdir():
        if not HIDDEN.search(entry.name):
            (shadow / entry.name).symlink_to(entry)
    (site / "parent_env.pth").write_text(f"{shadow}\n")
    return python, site


def _probe(python: Path, cwd: Path) -> dict:
    return json.loads(_run([python, "-c", PROBE], cwd).stdout)


@needs_released_names
class TestWheel:
    """The wheel's metadata declares ranges; installed offline into an environment that holds
    torch 2.14.1, it leaves that torch alone and imports.
    """

    def test_install_keeps_the_users_torch(self, tmp_path):
        wheel = _build_wheel(tmp_path)
        requires = _metadata(wheel).get_all("Requires-Dist")
        core = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0]: r for r in requires if ";" not in r}
        for name, spec in RANGES.items():
            assert core[name] == f"{name}{spec}", core[name]
        pinned = [r for r in requires if "==" in r.split(";")[0]]  # markers read `extra == ...`
        assert not pinned, pinned

        python, site = _fresh_venv_seeing_this_torch(tmp_path)
        before = _probe(python, tmp_path)
        assert before["torchrl_ext_file"] is None  # not importable before the install
        assert before["torch_version"] == torch.__version__
        listed = json.loads(_run([python, "-m", "pip", "list", "--format=json"], tmp_path).stdout)
        assert {"name": "torch", "version": metadata.version("torch")} in [
            {"name": d["name"].lower(), "version": d["version"]} for d in listed
        ]

        install = _run(
            [python, "-m", "pip", "install", "--isolated", "--no-index"]
            + ["--find-links", wheel.parent, "torchrl_ext"],
            cwd=tmp_path,
        )
        (installed,) = re.findall(r"Successfully installed (.+)", install.stdout)
        assert re.sub(r"[-_.]+", "-", installed.strip().lower()) == "torchrl-ext-0-1-0"

        after = _probe(python, tmp_path)
        assert after["torch_version"] == before["torch_version"] == torch.__version__
        assert after["torch_file"] == before["torch_file"] == os.path.realpath(torch.__file__)
        assert Path(after["torchrl_ext_file"]).is_relative_to(site)
        assert after["sequence"] == 4
        assert not (site / "torch").exists()


def test_wheel_ships_the_typing_marker(tmp_path):
    """``py.typed`` is in the wheel, so type checkers read the package's annotations."""
    with zipfile.ZipFile(_build_wheel(tmp_path)) as zf:
        assert "torchrl_ext/py.typed" in zf.namelist()


def test_wheel_is_the_library_alone(tmp_path):
    """The wheel holds the package and its metadata: the example pipelines stay in the repo."""
    with zipfile.ZipFile(_build_wheel(tmp_path)) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"torchrl_ext"}
    assert not any("examples" in name for name in names), "examples live outside the wheel"


def test_setup_py_is_a_shim():
    """The metadata lives in pyproject.toml only: setup.py passes nothing to setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert [ast.unparse(c) for c in calls] == ["setup()"]


@pytest.mark.parametrize("name", ["LICENSE", "constraints.txt"])
def test_release_files_exist(name):
    assert (ROOT / name).read_text().strip()


def test_constraints_pin_what_pyproject_ranges():
    """constraints.txt pins, inside the declared ranges, the versions CI installs."""
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["torch"] == "2.14.1"
    assert pins["torchrl"] == "0.14.1"
    assert pins["tensordict"] == "0.14.3"
    assert pins["warp-lang"] == "1.19.0"
    assert "-c constraints.txt" in (ROOT / "scripts" / "venv.sh").read_text()
