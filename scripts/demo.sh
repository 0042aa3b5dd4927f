#!/usr/bin/env bash
# The main job: recurrent PPO on CartPole without velocities, end to end. Trains the LSTM agent on
# 3 seeds and the feed-forward baseline on 1 (1 torch thread each), then prints the results table
# (frames and seconds to a mean return of 475, final deterministic evaluation) and where it and
# the learning curves are (runs/results/ by default). Extra arguments go to the `results`
# subcommand (e.g. --seeds 0, --out DIR, --table PATH); --quick runs a few checked batches of each
# pipeline (PPO, R2D2, course driving) instead, writing under runs/quick/.
set -euo pipefail
source "$(dirname "$0")/venv.sh" examples
if [ "${1:-}" = "--quick" ]; then
  exec python -m torchrl_ext.examples --quick
fi
exec python -m torchrl_ext.examples results "$@"
