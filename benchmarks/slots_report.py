"""Distributed R2D2 end to end, the learner's samples through shared-memory slots or through Ray.

Usage::

    PYTHONPATH=$PWD python benchmarks/slots_report.py [--seeds 0 1 2] [--rounds 2]
        [--frames 300000] [--out DIR]

Each run is ``python examples/r2d2_distributed.py --seeds N --frames F`` in a fresh process,
in one of two modes:

* ``on``: as shipped. On the replay service's node it writes every packed sample into a file in
  ``/dev/shm`` that the learner lends it (:mod:`torchrl_ext.distributed.slots`).
* ``off``: the learner's slot pool lends no slot, as where ``/dev/shm`` is not writable, so
  every sample travels through Ray's object store. Nothing else differs.

The two modes of one seed run back to back, in an order that flips from seed to seed and from
round to round, so a drift of the machine's speed falls on both. Per run: learner updates and
frames per second over the run, and the first frame count and second at which the mean return
reached 400 (the run's own clock). Then, per pair of runs (one seed, one round), the ratio of
``on`` to ``off`` in frames per second and in updates per second: their median and range.
The learner keeps the example's replay ratio (one update per 64 frames), so the two rates move
together; they measure the whole layout (actors, service and learner sharing the machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _examples_path  # noqa: F401  (puts examples/ on sys.path)

MODES = ("on", "off")
TARGET = 400.0


def run_worker(mode: str, seed: int, frames: int, out: Path) -> None:
    """One run of the distributed example in this process, with slots ``on`` or ``off``."""
    if mode == "off":
        from torchrl_ext.distributed import slots

        slots.SlotPool.acquire = lambda self: None  # every sample through Ray's object store
    import r2d2_distributed
    import runs

    argv = ["--seeds", str(seed), "--frames", str(frames)]
    argv += ["--no-progress", "--out", str(out), "--overwrite"]
    runs.main(r2d2_distributed.Args, r2d2_distributed.train, argv, r2d2_distributed.QUICK)


def summary(folder: Path) -> dict[str, float | None]:
    """Rates and the first crossing of :data:`TARGET` in the logs of the run in ``folder``."""
    import runs

    scalars = runs.read_scalars(folder)
    frames, seconds = scalars["seconds"][-1]
    updates = scalars["updates"][-1][1]
    clock = dict(scalars["seconds"])
    hit = next((f for f, v in scalars["mean_return"] if v >= TARGET), None)
    return {
        "frames_per_s": frames / seconds,
        "updates_per_s": updates / seconds,
        "frames_to_target": hit,
        "seconds_to_target": None if hit is None else clock[hit],
    }


def pair_ratios(rows: list[dict], key: str) -> list[float]:
    """``on`` over ``off`` of ``key`` for every seed and round that has both runs.

    Examples:
        >>> rows = [
        ...     {"seed": 0, "round": 0, "mode": "on", "rate": 3.0},
        ...     {"seed": 0, "round": 0, "mode": "off", "rate": 2.0},
        ...     {"seed": 1, "round": 0, "mode": "on", "rate": 1.0},
        ... ]
        >>> pair_ratios(rows, "rate")
        [1.5]
    """
    runs = {(r["seed"], r["round"], r["mode"]): r[key] for r in rows}
    pairs = sorted({(seed, rnd) for seed, rnd, _ in runs})
    return [
        runs[seed, rnd, "on"] / runs[seed, rnd, "off"]
        for seed, rnd in pairs
        if (seed, rnd, "on") in runs and (seed, rnd, "off") in runs
    ]


def order(seed: int, rnd: int) -> tuple[str, str]:
    """The two modes of one pair, in the order they run.

    Examples:
        >>> [order(seed, 0) for seed in range(3)], order(0, 1)
        ([('on', 'off'), ('off', 'on'), ('on', 'off')], ('off', 'on'))
    """
    return MODES if (seed + rnd) % 2 == 0 else MODES[::-1]


def report(rows: list[dict]) -> str:
    """Medians and ranges per mode, and the pair ratios."""
    lines = []
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        for key in ("frames_per_s", "updates_per_s", "seconds_to_target"):
            values = [r[key] for r in mine if r[key] is not None]
            if values:
                lines.append(
                    f"{mode:>3} {key}: median {statistics.median(values):.1f} "
                    f"[{min(values):.1f}, {max(values):.1f}] over {len(values)} runs"
                )
    for key in ("frames_per_s", "updates_per_s"):
        ratios = pair_ratios(rows, key)
        if ratios:
            lines.append(
                f"on/off {key}: median {statistics.median(ratios):.3f} "
                f"[{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} pairs"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frames", type=int, default=300_000)
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: a temp dir)")
    parser.add_argument("--worker", nargs=4, metavar=("MODE", "SEED", "FRAMES", "OUT"))
    args = parser.parse_args()
    if args.worker:
        mode, seed, frames, out = args.worker
        run_worker(mode, int(seed), int(frames), Path(out))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="slots_report-"))
    rows = []
    for rnd in range(args.rounds):
        for seed in args.seeds:
            for mode in order(seed, rnd):
                folder = out / f"round{rnd}-{mode}"
                worker = [sys.executable, __file__, "--worker", mode, str(seed), str(args.frames)]
                subprocess.run([*worker, str(folder)], check=True, capture_output=True)
                row = {"mode": mode, "seed": seed, "round": rnd}
                row.update(summary(folder / f"seed{seed}"))
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(report(rows))


if __name__ == "__main__":
    main()
