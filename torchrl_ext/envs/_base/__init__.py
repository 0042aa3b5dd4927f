"""The parts a :class:`~torchrl_ext.envs.WarpEnv` hands its work to, each owning its state.

``layout`` (the buffers, from the specs), ``kernels`` and ``physics`` (the kernels generated
from an env's Warp functions), ``launcher`` (recorded launches and graphs), ``saved`` (state
dicts), ``actions`` (loading and checking actions), ``fused`` (the fused step's next root),
``rollout`` (the policy-free rollout's outputs) and ``shim`` (TorchRL's ``EnvBase`` protocol).
"""
