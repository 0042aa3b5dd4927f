"""The quickstart the README shows, whole (run as a test: test/test_quickstart.py)."""

import torch
from tensordict.nn import TensorDictModule
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from torchrl_ext import Sequence
from torchrl_ext.envs import CartPoleEnv
from torchrl_ext.objectives import RecurrentGAE

env = CartPoleEnv(num_envs=16, observe_velocity=False, seed=0)  # Warp-backed
critic = TensorDictModule(torch.nn.Linear(2, 1), ["observation"], ["state_value"])
rollout = env.rollout(64, break_when_any_done=False)  # [16 envs, 64 steps]
rollout = RecurrentGAE(gamma=0.99, lmbda=0.95, value_network=critic)(rollout)
replay = TensorDictReplayBuffer(
    storage=LazyTensorStorage(16 * 64, ndim=2),  # time x env lanes
    sample_unit=Sequence(length=16, burn_in=8, layout="batch_time"),
    batch_size=4,
)
replay.extend(rollout)
batch = replay.sample()  # 4 windows: 8 burn-in steps, then 16 to learn from
print(batch.shape, batch["is_init"][:, 0].all())  # torch.Size([4, 24]) tensor(True)
