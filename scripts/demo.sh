#!/usr/bin/env bash
# The main job: recurrent PPO on CartPole without velocities, end to end. Trains the LSTM agent on
# 3 seeds and the feed-forward baseline on 1 (1 torch thread each), then prints the results table
# (frames and seconds to a mean return of 475, final deterministic evaluation) and where it and
# the learning curves are (runs/cartpole_results/ by default). Extra arguments go to examples/cartpole_results.py
# (e.g. --seeds 0, --out DIR, --table PATH); --quick instead runs every pipeline in examples/ for
# a few checked batches, writing under runs/quick/.
set -euo pipefail
source "$(dirname "$0")/venv.sh" examples
if [ "${1:-}" = "--quick" ]; then
  for pipeline in ppo_cartpole r2d2_cartpole ppo_course mappo_signalling ppo_popgym r2d2_popgym; do
    echo "=== examples/$pipeline.py --quick"
    python "examples/$pipeline.py" --quick --no-progress
  done
  exit
fi
exec python examples/cartpole_results.py "$@"
