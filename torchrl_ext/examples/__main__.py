"""The main job: ``python -m torchrl_ext.examples [--quick] [results options]``.

Without ``--quick`` it runs the recurrent PPO demo end to end (3 LSTM seeds and a feed-forward
baseline, :mod:`torchrl_ext.examples.ppo_cartpole_results`), prints the results table and where
the plot is. ``--quick`` runs a few checked iterations of each of the three pipelines (recurrent
PPO, R2D2-style recurrent Q-learning, course-driving PPO); each asserts finite losses and the
shapes and masks its update relies on.
"""

from __future__ import annotations

import sys
import tempfile
import time

from torchrl_ext.examples import ppo_cartpole, ppo_cartpole_results, ppo_course, r2d2_cartpole

QUICK_PIPELINES = {
    "recurrent PPO (CartPole, no velocities)": ppo_cartpole.main,
    "R2D2-style recurrent Q-learning (CartPole, no velocities)": r2d2_cartpole.main,
    "course-driving PPO (CourseEnv)": ppo_course.main,
}


def run_quick() -> dict[str, float]:
    """Runs every pipeline's ``--quick`` mode; returns seconds per pipeline."""
    seconds = {}
    with tempfile.TemporaryDirectory() as out:
        for name, main in QUICK_PIPELINES.items():
            print(f"=== {name}: --quick", flush=True)
            start = time.perf_counter()
            main(["--quick", "--no-progress", "--out", f"{out}/{main.__module__}"])
            seconds[name] = time.perf_counter() - start
    for name, value in seconds.items():
        print(f"quick run ok: {name} ({value:.1f} s)")
    return seconds


def main(argv: list[str] | None = None) -> None:
    """Dispatches to the quick checks or the full demo."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--quick" in argv:
        argv.remove("--quick")
        if argv:
            raise SystemExit(f"--quick takes no other arguments, got {argv}")
        run_quick()
        return
    ppo_cartpole_results.main(argv)


if __name__ == "__main__":
    main()
