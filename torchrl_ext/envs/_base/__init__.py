"""The parts a :class:`~torchrl_ext.envs.WarpEnv` hands its work to, each owning its state.

``layout`` (the buffers, from the specs, and the fresh outputs made of them), ``kernels`` and
``generated`` (the kernels generated from an env's Warp functions), ``authoring`` (the checks
of those functions, constants and keys before anything compiles), ``launcher`` (recorded
launches and graphs), ``state_dicts`` (state dicts), ``actions`` (loading and checking actions),
``fused`` (the fused step's next root) and ``rollout`` (the policy-free rollout's outputs).
TorchRL's ``EnvBase`` methods themselves are ``WarpEnv``'s own.
"""
