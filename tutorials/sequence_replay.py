"""
Sequence replay for recurrent agents
====================================

A recurrent off-policy learner (R2D2 and its descendants) does not learn from single
transitions: it replays *windows* of experience. Each window starts with a **burn-in** that
only rebuilds the recurrent state, continues with the **learning region** that carries the
loss, and ends with a few **bootstrap** records for multi-step targets.

:class:`~torchrl_ext.data.Sequence` is a TorchRL *sample unit*: the buffer's sampler still decides
which records are drawn (the *anchors*, uniformly or by priority), and the unit expands each
anchor into its window before the storage is read. This tutorial walks through the window
geometry, the three episode-boundary policies, priorities per anchor and the ``[B, T]``
layout that an ``LSTMModule`` consumes directly.
"""

# %%
# A small buffer with visible episodes
# ------------------------------------
# Twenty records, two episodes: records 0-9 and 10-19. The ``obs`` entry holds the record's
# number so that every window below can be read at a glance.
import matplotlib.pyplot as plt
import torch
from tensordict import TensorDict
from torchrl.data import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.modules import LSTMModule

from torchrl_ext import Sequence

done = torch.zeros(20, 1, dtype=torch.bool)
done[[9, 19]] = True
data = TensorDict({"obs": torch.arange(20.0).unsqueeze(-1), ("next", "done"): done}, [20])
storage = LazyTensorStorage(20)
buffer = TensorDictReplayBuffer(storage=storage)
_ = buffer.extend(data)


def show(unit, anchors):
    """Prints each anchor's window: record numbers, invalid ones in brackets."""
    index, info = unit.expand(torch.tensor(anchors), {}, storage)
    index = index.view(len(anchors), -1).tolist()
    valid = info["validity_mask"].view(len(anchors), -1).tolist()
    for anchor, row, ok in zip(anchors, index, valid, strict=True):
        cells = [f"{i:>3}" if v else f"[{i}]" for i, v in zip(row, ok, strict=True)]
        print(f"anchor {anchor:>2}: " + " ".join(cells))


# %%
# Window geometry: burn-in, learning region, bootstrap, stride
# ------------------------------------------------------------
# ``Sequence(length=3, burn_in=2, bootstrap=1)`` expands an anchor into 2 + 3 + 1 = 6
# records. The anchor is the first record of the learning region; ``learning_mask`` is True
# exactly there.
unit = Sequence(length=3, burn_in=2, bootstrap=1)
show(unit, [4, 12])
_, info = unit.expand(torch.tensor([4]), {}, storage)
print("learning_mask:", info["learning_mask"].int().tolist())

# %%
# ``stride`` (torchrl calls it ``dilation``) spaces the records of a window.
show(Sequence(length=3, stride=2), [2])

# %%
# Episode boundaries
# ------------------
# Burn-in never moves the anchor: records before the episode's first record repeat it and
# are marked invalid (in brackets). At the other end the three policies differ.
#
# ``pad`` keeps the anchor and repeats the episode's last record:
show(Sequence(length=4, burn_in=2, episode_boundary="pad"), [8, 11])

# %%
# ``stop`` moves the window back so that it ends on the episode's last record (and falls
# back to padding when the episode is shorter than the window). ``anchor_index`` still
# reports the anchor the sampler drew, so priorities go to the right place.
show(Sequence(length=4, burn_in=2, episode_boundary="stop"), [8, 11])

# %%
# ``include_reset`` runs across episode ends with every record valid. It never crosses the
# ring buffer's write seam (between the newest and the oldest record) nor reads slots that were
# never written.
show(Sequence(length=4, burn_in=2, episode_boundary="include_reset"), [8, 18])

# %%
# The three policies side by side, with a bootstrap record: each row is one window, each cell one
# record (its number), coloured by region; faded cells, in brackets, are invalid. Episode 1
# ends at record 9.
fig, ax = plt.subplots(figsize=(7, 3.6))
colors = {"burn-in": "#c6dbef", "learning": "#fdae6b", "bootstrap": "#a1d99b"}
rows = []
for boundary in ("pad", "stop", "include_reset"):
    unit = Sequence(length=4, burn_in=2, bootstrap=1, episode_boundary=boundary)
    for anchor in (5, 8):
        index, info = unit.expand(torch.tensor([anchor]), {}, storage)
        rows.append((f"{boundary}, anchor {anchor}", index, info))
for r, (_, index, info) in enumerate(rows):
    cells = zip(
        index.flatten().tolist(),
        info["validity_mask"].flatten().tolist(),
        info["learning_mask"].flatten().tolist(),
        strict=True,
    )
    for c, (i, ok, learn) in enumerate(cells):
        region = "burn-in" if c < 2 else ("learning" if learn else "bootstrap")
        face = colors[region]
        ax.add_patch(plt.Rectangle((c, -r), 0.95, 0.9, fc=face, ec="0.4", alpha=1 if ok else 0.3))
        text = str(i) if ok else f"[{i}]"
        ax.text(c + 0.47, -r + 0.45, text, ha="center", va="center", fontsize=9)
ax.set_yticks([-r + 0.45 for r in range(len(rows))], [label for label, _, _ in rows])
ax.set_xticks([c + 0.47 for c in range(7)], [f"{c}" for c in range(7)])
ax.set_xlabel("position in the window")
ax.set_xlim(0, 7)
ax.set_ylim(-len(rows) + 0.9, 0.95)
handles = [plt.Rectangle((0, 0), 1, 1, color=v) for v in colors.values()]
ax.legend(
    handles, colors.keys(), ncol=3, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 1.15)
)
for side in ("top", "right", "left"):
    ax.spines[side].set_visible(False)
fig.tight_layout()
plt.show()

# %%
# In a real buffer
# ----------------
# Pass the unit to any stock TorchRL buffer. ``sample()`` returns ``B * window`` records and
# the per-record masks as keys. ``FastLazyTensorStorage`` is a drop-in ``LazyTensorStorage``
# that reads the sampled rows three to four times faster and returns the same data.
from torchrl_ext.data import FastLazyTensorStorage

rb = TensorDictReplayBuffer(
    storage=FastLazyTensorStorage(1000),
    sample_unit=Sequence(length=8, burn_in=4, bootstrap=1),
    batch_size=16,
    generator=torch.Generator().manual_seed(0),
)
gen = torch.Generator().manual_seed(0)
experience = TensorDict(
    {
        "obs": torch.randn(1000, 4, generator=gen),
        ("next", "done"): torch.rand(1000, 1, generator=gen) < 0.02,
    },
    [1000],
)
_ = rb.extend(experience)
batch = rb.sample()
print(batch.shape, sorted(k for k in batch.keys() if isinstance(k, str)))

# %%
# Priorities per anchor
# ---------------------
# A window's records share one priority: that of its anchor. Write per-record TD errors into
# the sample under the buffer's ``priority_key`` and call ``unit.update_priority(rb, sample)``:
# the unit reduces each window over its valid records (here R2D2's
# ``0.9 * max + 0.1 * mean``) and writes one priority per anchor through the buffer's public
# ``update_priority``. TorchRL's own ``rb.update_tensordict_priority(sample)`` is routed
# through the unit and gives the same result (see the concept page).
unit = Sequence(length=8, burn_in=4, priority_reduction="mixture", priority_eta=0.9)
prb = TensorDictPrioritizedReplayBuffer(
    alpha=0.9,
    beta=0.6,
    storage=LazyTensorStorage(1000),
    sample_unit=unit,
    batch_size=16,
    generator=torch.Generator().manual_seed(0),
)
_ = prb.extend(experience)
batch = prb.sample()
batch.set("td_error", torch.rand(batch.shape, generator=gen))
anchors, priority = unit.reduce_priority(batch, batch["td_error"])
unit.update_priority(prb, batch)
print(f"{batch.numel()} records, {anchors.numel()} anchors updated")

# %%
# The ``[B, T]`` layout for recurrent modules
# -------------------------------------------
# ``layout="batch_time"`` returns samples shaped ``[B, window]`` and an ``is_init`` entry
# that is True at each window's first record, where its valid part begins and wherever a
# new episode starts inside it. A TorchRL ``LSTMModule`` in recurrent mode resets its state
# exactly there, so it consumes the batch as it is.
rb = TensorDictReplayBuffer(
    storage=LazyTensorStorage(1000),
    sample_unit=Sequence(length=8, burn_in=4, bootstrap=1, layout="batch_time"),
    batch_size=16,
    generator=torch.Generator().manual_seed(0),
)
_ = rb.extend(experience)
lstm = LSTMModule(
    input_size=4, hidden_size=32, in_key="obs", out_key="features", default_recurrent_mode=True
)
batch = lstm(rb.sample())
print(batch.shape, batch["features"].shape, batch["is_init"][:, 0].all().item())

# %%
# Learn only where both masks agree: the learning region, on valid records.
loss_mask = batch["learning_mask"] & batch["validity_mask"]
print("records carrying the loss:", int(loss_mask.sum()), "of", loss_mask.numel())

# %%
# The stored-state recipe (R2D2)
# ------------------------------
# R2D2 starts each window from the recurrent state that the actor had when it produced the
# window's first record, stored alongside the data. Store the LSTM state with every record
# (a TorchRL collector with a ``TensorDictPrimer`` does this), sample with
# ``layout="batch_time"``, then clear ``is_init`` on the first column: the ``LSTMModule`` then
# starts from the stored state instead of zeros, while resets inside the window still apply.
# One of those resets is where a window's valid part begins (a burn-in clamped at its episode's
# first record): the state is zeroed there, which is also what the actor had at that record.
hidden = torch.zeros(1000, 1, 32)  # what the actor's LSTM held before each record
stored = experience.clone()
stored["recurrent_state_h"] = hidden
stored["recurrent_state_c"] = hidden.clone()
rb = TensorDictReplayBuffer(
    storage=LazyTensorStorage(1000),
    sample_unit=Sequence(length=8, burn_in=4, layout="batch_time"),
    batch_size=16,
    generator=torch.Generator().manual_seed(0),
)
_ = rb.extend(stored)
batch = rb.sample()
batch["is_init"][:, 0] = False
out = lstm(batch)
print(out["features"].shape)
