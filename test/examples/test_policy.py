"""``load_policy(run_dir)``: the trained policy of a run folder, loaded as data only."""

from __future__ import annotations

import pytest
import torch
from malicious_files import REFUSED
from tensordict.nn import TensorDictModuleBase
from test_pipelines import _run
from test_safe_resume import crafted_checkpoint

from torchrl_ext.examples import _run_folder, load_policy


@pytest.mark.parametrize("name", ["ppo", "r2d2"])
def test_loaded_policy_is_the_trained_one(tmp_path, name):
    """The policy's parameters are the checkpoint's, and it acts on the pipeline's env."""
    _run(name, "--quick", "--out", str(tmp_path))
    policy = load_policy(tmp_path / "seed0")
    assert isinstance(policy, TensorDictModuleBase) and not policy.training
    saved = _run_folder.load_checkpoint(_run_folder.find_checkpoint(tmp_path / "seed0"))["loss"]
    saved = [v for k, v in saved.items() if "target" not in k]
    for param in policy.parameters():
        assert any(p.shape == param.shape and torch.equal(p, param) for p in saved)


def test_crafted_checkpoint_is_refused(tmp_path, marker):
    crafted = crafted_checkpoint(tmp_path, marker)
    with pytest.raises(ValueError, match=f"{crafted}.*{REFUSED}"):
        load_policy(tmp_path)
