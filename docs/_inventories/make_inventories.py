"""Write the intersphinx inventories the documentation links through.

The documentation builds without network access, so instead of downloading each project's
``objects.inv`` it ships small inventories listing the names our pages and docstrings refer to,
each mapped to its page in that project's public documentation. Sphinx's own inventory writer
produces the files, so intersphinx reads them like downloaded ones.

Run from the repository root after adding a name (``python docs/_inventories/make_inventories.py``);
``docs/conf.py`` points ``intersphinx_mapping`` at the ``.inv`` files next to this script.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from sphinx.util.inventory import InventoryFile

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (role, page relative to the project's documentation root[, anchor]). On a page of its
# own (an autosummary ``generated/`` page) an object's anchor is the page's name, so aliases (the
# module a class is defined in, e.g. ``torchrl.envs.common.EnvBase``, as autodoc prints it) land on
# the documented object; on a shared page (``library/functions.html``) the anchor is the name.
PYTHON = {
    "int": ("class", "library/functions.html"),
    "float": ("class", "library/functions.html"),
    "bool": ("class", "library/functions.html"),
    "str": ("class", "library/stdtypes.html"),
    "list": ("class", "library/stdtypes.html"),
    "tuple": ("class", "library/stdtypes.html"),
    "dict": ("class", "library/stdtypes.html"),
    "object": ("class", "library/functions.html"),
    "None": ("data", "library/constants.html"),
    "NotImplemented": ("data", "library/constants.html"),
    "typing.Any": ("data", "library/typing.html"),
    "typing.Literal": ("data", "library/typing.html"),
    "collections.abc.Callable": ("class", "library/collections.abc.html"),
    "collections.abc.Iterator": ("class", "library/collections.abc.html"),
    "collections.abc.Sequence": ("class", "library/collections.abc.html"),
    "enum.IntEnum": ("class", "library/enum.html"),
    "enum.IntFlag": ("class", "library/enum.html"),
    "enum.Enum": ("class", "library/enum.html"),
    "ValueError": ("exception", "library/exceptions.html"),
    "TypeError": ("exception", "library/exceptions.html"),
    "RuntimeError": ("exception", "library/exceptions.html"),
    "ImportError": ("exception", "library/exceptions.html"),
    "KeyError": ("exception", "library/exceptions.html"),
}

TORCH = {
    "torch.Tensor": ("class", "tensors.html"),
    "torch.dtype": ("class", "tensor_attributes.html"),
    "torch.device": ("class", "tensor_attributes.html"),
    "torch.Size": ("class", "size.html"),
    "torch.float32": ("attribute", "tensor_attributes.html"),
    "torch.float64": ("attribute", "tensor_attributes.html"),
    "torch.Generator": ("class", "generated/torch.Generator.html"),
    "torch.nn.Module": ("class", "generated/torch.nn.Module.html"),
    "torch.nn.modules.module.Module": ("class", "generated/torch.nn.Module.html"),
    "torch.nn.LSTM": ("class", "generated/torch.nn.LSTM.html"),
    "torch.nn.GRU": ("class", "generated/torch.nn.GRU.html"),
    "torch.cuda.graph": ("class", "generated/torch.cuda.graph.html"),
    "torch.cuda.CUDAGraph": ("class", "generated/torch.cuda.CUDAGraph.html"),
    "torch.compile": ("function", "generated/torch.compile.html"),
}

TENSORDICT = {
    "tensordict.TensorDict": ("class", "reference/generated/tensordict.TensorDict.html"),
    "tensordict._td.TensorDict": ("class", "reference/generated/tensordict.TensorDict.html"),
    "tensordict.TensorDictBase": ("class", "reference/generated/tensordict.TensorDictBase.html"),
    "tensordict.base.TensorDictBase": (
        "class",
        "reference/generated/tensordict.TensorDictBase.html",
    ),
    "tensordict.nn.TensorDictModule": (
        "class",
        "reference/generated/tensordict.nn.TensorDictModule.html",
    ),
    "tensordict.nn.TensorDictModuleBase": (
        "class",
        "reference/generated/tensordict.nn.TensorDictModuleBase.html",
    ),
}

_RL = "reference/generated/"
TORCHRL = {
    "torchrl.envs.EnvBase": ("class", _RL + "torchrl.envs.EnvBase.html"),
    "torchrl.envs.common.EnvBase": ("class", _RL + "torchrl.envs.EnvBase.html"),
    "torchrl.envs.EnvBase.rollout": (
        "method",
        _RL + "torchrl.envs.EnvBase.html",
        "torchrl.envs.EnvBase.rollout",
    ),
    "torchrl.envs.EnvBase.rand_action": (
        "method",
        _RL + "torchrl.envs.EnvBase.html",
        "torchrl.envs.EnvBase.rand_action",
    ),
    "torchrl.envs.EnvBase.step_and_maybe_reset": (
        "method",
        _RL + "torchrl.envs.EnvBase.html",
        "torchrl.envs.EnvBase.step_and_maybe_reset",
    ),
    "torchrl.envs.Transform": ("class", _RL + "torchrl.envs.transforms.Transform.html"),
    "torchrl.envs.transforms.Transform": ("class", _RL + "torchrl.envs.transforms.Transform.html"),
    "torchrl.envs.transforms._base.Transform": (
        "class",
        _RL + "torchrl.envs.transforms.Transform.html",
    ),
    "torchrl.envs.transforms.TensorDictPrimer": (
        "class",
        _RL + "torchrl.envs.transforms.TensorDictPrimer.html",
    ),
    "torchrl.envs.TransformedEnv": ("class", _RL + "torchrl.envs.transforms.TransformedEnv.html"),
    "torchrl.envs.InitTracker": ("class", _RL + "torchrl.envs.transforms.InitTracker.html"),
    "torchrl.envs.StepCounter": ("class", _RL + "torchrl.envs.transforms.StepCounter.html"),
    "torchrl.envs.utils.check_env_specs": (
        "function",
        _RL + "torchrl.envs.utils.check_env_specs.html",
    ),
    "torchrl.collectors.Collector": ("class", _RL + "torchrl.collectors.Collector.html"),
    "torchrl.data.ReplayBuffer": ("class", _RL + "torchrl.data.ReplayBuffer.html"),
    "torchrl.data.TensorDictReplayBuffer": (
        "class",
        _RL + "torchrl.data.TensorDictReplayBuffer.html",
    ),
    "torchrl.data.TensorDictPrioritizedReplayBuffer": (
        "class",
        _RL + "torchrl.data.TensorDictPrioritizedReplayBuffer.html",
    ),
    "torchrl.data.LazyTensorStorage": (
        "class",
        _RL + "torchrl.data.replay_buffers.LazyTensorStorage.html",
    ),
    "torchrl.data.replay_buffers.storages.LazyTensorStorage": (
        "class",
        _RL + "torchrl.data.replay_buffers.LazyTensorStorage.html",
    ),
    "torchrl.data.LazyMemmapStorage": (
        "class",
        _RL + "torchrl.data.replay_buffers.LazyMemmapStorage.html",
    ),
    "torchrl.data.replay_buffers.storages.LazyMemmapStorage": (
        "class",
        _RL + "torchrl.data.replay_buffers.LazyMemmapStorage.html",
    ),
    "torchrl.data.SliceSampler": ("class", _RL + "torchrl.data.replay_buffers.SliceSampler.html"),
    "torchrl.data.replay_buffers.Sampler": (
        "class",
        _RL + "torchrl.data.replay_buffers.Sampler.html",
    ),
    "torchrl.data.replay_buffers.samplers.Sampler": (
        "class",
        _RL + "torchrl.data.replay_buffers.Sampler.html",
    ),
    "torchrl.modules.LSTMModule": ("class", _RL + "torchrl.modules.LSTMModule.html"),
    "torchrl.modules.GRUModule": ("class", _RL + "torchrl.modules.GRUModule.html"),
    "torchrl.objectives.ClipPPOLoss": ("class", _RL + "torchrl.objectives.ClipPPOLoss.html"),
    "torchrl.objectives.LossModule": ("class", _RL + "torchrl.objectives.LossModule.html"),
    "torchrl.objectives.value.GAE": ("class", _RL + "torchrl.objectives.value.GAE.html"),
    "torchrl.objectives.value.ValueEstimatorBase": (
        "class",
        _RL + "torchrl.objectives.value.ValueEstimatorBase.html",
    ),
    "torchrl.objectives.value.advantages.ValueEstimatorBase": (
        "class",
        _RL + "torchrl.objectives.value.ValueEstimatorBase.html",
    ),
}

_WP = "api_reference/_generated/"
WARP = {
    "warp.array": ("class", _WP + "warp.array.html"),
    "warp.Device": ("class", _WP + "warp.Device.html"),
    "warp.context.Device": ("class", _WP + "warp.Device.html"),
    "warp.Graph": ("class", _WP + "warp.Graph.html"),
    "warp._src.context.Graph": ("class", _WP + "warp.Graph.html"),
    "warp.ScopedCapture": ("class", _WP + "warp.ScopedCapture.html"),
    "warp.func": ("function", _WP + "warp.func.html"),
    "warp.kernel": ("function", _WP + "warp.kernel.html"),
    "warp.struct": ("function", _WP + "warp.struct.html"),
    "warp.launch": ("function", _WP + "warp.launch.html"),
    "warp.capture_begin": ("function", _WP + "warp.capture_begin.html"),
    "warp.capture_launch": ("function", _WP + "warp.capture_launch.html"),
    "warp.from_torch": ("function", _WP + "warp.from_torch.html"),
}

PROJECTS = {
    "python": ("Python", "3", PYTHON),
    "torch": ("PyTorch", "stable", TORCH),
    "tensordict": ("tensordict", "stable", TENSORDICT),
    "torchrl": ("torchrl", "stable", TORCHRL),
    "warp": ("Warp", "stable", WARP),
}


class _PythonDomain:
    """The slice of a Sphinx domain that ``InventoryFile.dump`` reads: ``name``, ``get_objects``."""

    name = "py"

    def __init__(self, names: dict[str, tuple[str, ...]]) -> None:
        self.names = names

    def get_objects(self):
        for fullname, (role, page, *anchor) in self.names.items():
            if not anchor:
                own_page = "/generated/" in f"/{page}"
                anchor = [page.rsplit("/", 1)[-1].removesuffix(".html") if own_page else fullname]
            anchor = anchor[0]
            # (name, display name, object type, page, anchor, priority); the builder below
            # returns pages as they are.
            yield fullname, fullname, role, page, anchor, 1


def write(name: str) -> str:
    """Write ``<name>.inv`` next to this script and return its path."""
    project, version, names = PROJECTS[name]
    domain = _PythonDomain(names)
    env = SimpleNamespace(
        config=SimpleNamespace(project=project, version=version),
        domains=SimpleNamespace(sorted=lambda: [domain]),
    )
    builder = SimpleNamespace(get_target_uri=lambda page: page)
    path = os.path.join(HERE, f"{name}.inv")
    InventoryFile.dump(path, env, builder)
    return path


if __name__ == "__main__":
    for name in PROJECTS:
        print(write(name))
