#!/usr/bin/env bash
# The whole test suite: lint, unit tests, doctests, benchmarks (smoke), tutorials and docs (-W).
set -euo pipefail
source "$(dirname "$0")/venv.sh" test,docs,examples,hydra,ray
export PYTHONHASHSEED=0
step() { printf '\n=== %s\n' "$*"; }
step "ruff check";            ruff check .
step "ruff format --check";   ruff format --check .
step "pytest (tests + doctests)"
python -m pytest -q test torchrl_ext examples --doctest-modules -p no:cacheprovider
step "benchmarks (smoke, --benchmark-disable)"
python -m pytest -q benchmarks --benchmark-disable -p no:cacheprovider
step "docs (sphinx -W; executes the tutorials)"
rm -rf docs/_build docs/auto_tutorials
TORCHRL_EXT_FAST=1 python -m sphinx -W --keep-going -q -b html docs docs/_build/html
echo "docs built: docs/_build/html/index.html"
