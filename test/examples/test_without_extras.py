"""``pip install torchrl_ext`` without extras, then a pipeline file copied alone runs.

The wheel is built from a copy of the sources and installed (``pip --python``, no package
index) into a new virtual environment that sees exactly the distributions the wheel requires,
and theirs, taken from this interpreter: a ``.pth`` file points at a folder of links to their
files. Nothing of the extras (tqdm, matplotlib, tensorboard, wandb, ray, hydra) is visible
there. ``examples/ppo_cartpole.py`` and ``examples/runs.py`` are copied into an empty folder
and run there, so an example that imports an extra unconditionally, or any file beside it,
fails here. The quick run trains with the plain progress lines and no plot; a logger that needs
a package is refused in one line naming it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from released_names import needs_released_names

ROOT = Path(__file__).resolve().parents[2]
#: What the build reads (pyproject.toml names README.md and LICENSE).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "torchrl_ext")
#: The example copied alone: one pipeline file and the helper beside it.
COPIED = ("ppo_cartpole.py", "runs.py")
#: Modules of the extras that must not be importable in the new environment.
EXTRAS = ("tqdm", "matplotlib", "tensorboard", "wandb", "ray", "hydra")


def _call(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def required_closure(name: str) -> list[metadata.Distribution]:
    """The installed distributions ``name`` requires without extras, and theirs, recursively.

    A requirement's own extras (``cuda-toolkit[cublas]``) count: what they require is included.
    """
    found, seen = {}, set()
    todo = [(text, "") for text in metadata.requires(name) or []]
    while todo:
        text, extra = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        dist = metadata.distribution(req.name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        found[key] = dist
        for wanted in {"", *req.extras} - {e for k, e in seen if k == key}:
            seen.add((key, wanted))
            todo += [(text, wanted) for text in dist.requires or []]
    return list(found.values())


def link_distributions(dists: list[metadata.Distribution], folder: Path) -> None:
    """Links the top-level files and folders of ``dists`` (code and metadata) into ``folder``."""
    folder.mkdir()
    for dist in dists:
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            source = Path(dist.locate_file(top))
            if source.exists() and not top.endswith(".pth") and not (folder / top).exists():
                (folder / top).symlink_to(source)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A new venv holding the wheel and, through links, only what the wheel requires."""
    tmp = tmp_path_factory.mktemp("without_extras")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        copy = shutil.copytree if path.is_dir() else shutil.copy2
        copy(
            path,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if path.is_dir() else {}),
        )
    built = _call(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--isolated",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "-q",
        "-w",
        tmp / "wheels",
        src,
        cwd=tmp,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "wheels").glob("torchrl_ext-*.whl")
    made = _call(sys.executable, "-m", "venv", "--without-pip", tmp / "venv", cwd=tmp)
    assert made.returncode == 0, made.stderr
    python = tmp / "venv" / "bin" / "python"
    site = _call(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp
    ).stdout.strip()
    link_distributions(required_closure("torchrl_ext"), tmp / "required")
    (Path(site) / "required.pth").write_text(f"{tmp / 'required'}\n")
    installed = _call(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--isolated",
        "--no-index",
        "-q",
        wheel,
        cwd=tmp,
    )
    assert installed.returncode == 0, installed.stderr
    for name in COPIED:
        shutil.copy2(ROOT / "examples" / name, tmp / name)
    return python, tmp


@needs_released_names
class TestWithoutExtras:
    """The examples need no extra to train; an option that needs one says which, in one line."""

    def test_extras_are_absent(self, venv):
        python, tmp = venv
        code = f"import importlib.util as u; print([m for m in {EXTRAS} if u.find_spec(m)])"
        assert _call(python, "-c", code, cwd=tmp).stdout.strip() == "[]"

    def test_copied_pipeline_runs_quick(self, venv):
        python, tmp = venv
        done = _call(python, "ppo_cartpole.py", "--quick", "--out", "o", cwd=tmp)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ppo_cartpole lstm seed 0: "), done.stdout
        assert "1,536/1,536 frames" in done.stderr  # the progress lines without tqdm
        assert "no plot: it needs matplotlib (pip install matplotlib)" in done.stderr
        assert (tmp / "o" / "seed0" / "config.json").is_file()

    @pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
    def test_logger_needing_a_package(self, venv, logger):
        python, tmp = venv
        done = _call(python, "ppo_cartpole.py", "--logger", logger, "--out", "x", cwd=tmp)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [
            f"ppo_cartpole.py: error: --logger {logger} needs {logger}: pip install {logger}"
        ]
        assert not (tmp / "x").exists()
