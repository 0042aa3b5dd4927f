#!/usr/bin/env bash
# The main job: recurrent PPO on CartPole without velocities, end to end. Trains the LSTM agent on
# 3 seeds and the feed-forward baseline on 1 (1 torch thread each), then prints the results table
# (frames and seconds to a mean return of 475, final deterministic evaluation) and where the
# learning curves are. Extra arguments go to the results script (e.g. --seeds 0).
set -euo pipefail
source "$(dirname "$0")/venv.sh" all
out=runs/ppo_cartpole
python -m torchrl_ext.examples.ppo_cartpole_results --out "$out" --table "$out/results.md" "$@"
