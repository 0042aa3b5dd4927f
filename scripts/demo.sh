#!/usr/bin/env bash
# The main job: recurrent PPO on CartPole without velocities, end to end. Trains the LSTM agent on
# 3 seeds and the feed-forward baseline on 1 (1 torch thread each), then prints the results table
# (frames and seconds to a mean return of 475, final deterministic evaluation) and where it and
# the learning curves are (runs/ppo_cartpole/ by default). Extra arguments go to the results
# script (e.g. --seeds 0, --out DIR, --table PATH); --quick runs a few checked iterations of each
# of the three pipelines instead (what CI's test suite runs).
set -euo pipefail
source "$(dirname "$0")/venv.sh" examples
if [ "${1:-}" = "--quick" ]; then
  exec python -m torchrl_ext.examples --quick
fi
exec python -m torchrl_ext.examples "$@"
