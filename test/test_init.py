"""The top-level package: lazy exports that ``dir()`` lists and that load on first access."""

import json
import subprocess
import sys

import torchrl_ext

#: In a fresh interpreter: ``dir(torchrl_ext)`` and the heavy modules loaded after it.
FRESH_DIR = (
    "import json, sys, torchrl_ext; names = dir(torchrl_ext); "
    "heavy = ('torch', 'torchrl', 'tensordict', 'warp'); "
    "loaded = [m for m in sys.modules "
    "if m.split('.')[0] in heavy or m.startswith('torchrl_ext.')]; "
    "print(json.dumps({'dir': names, 'loaded': sorted(loaded)}))"
)


class TestLazyModule:
    """``dir(torchrl_ext)`` shows every exported name without importing a subpackage."""

    def test_dir_lists_the_lazy_exports_before_any_import(self):
        out = subprocess.run(
            [sys.executable, "-c", FRESH_DIR], capture_output=True, text=True, check=True
        )
        fresh = json.loads(out.stdout)
        assert set(torchrl_ext.__all__) <= set(fresh["dir"])
        assert "__version__" in fresh["dir"]
        assert fresh["loaded"] == []  # listing loads nothing

    def test_every_listed_export_resolves(self):
        for name in torchrl_ext.__all__:
            assert getattr(torchrl_ext, name) is not None, name

    def test_dir_is_sorted_and_has_no_repeats(self):
        names = dir(torchrl_ext)
        assert names == sorted(set(names))

    def test_sample_units_are_the_data_subpackage_s(self):
        from torchrl_ext import data

        for name in ("SampleUnit", "Sequence", "Tape", "Transition"):
            assert name in torchrl_ext.__all__ and name in data.__all__
            assert getattr(torchrl_ext, name) is getattr(data, name)
