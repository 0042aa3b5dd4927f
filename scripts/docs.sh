#!/usr/bin/env bash
# The documentation alone: creates .venv (once), installs the package with the docs extra at the
# versions of constraints.txt, and builds the HTML into docs/_build/html (warnings are errors;
# the tutorials run, at the reduced sizes of TORCHRL_EXT_FAST=1). Extra arguments go to Sphinx.
set -euo pipefail
source "$(dirname "$0")/venv.sh" docs
rm -rf docs/_build docs/auto_tutorials
TORCHRL_EXT_FAST=1 python -m sphinx -W --keep-going -b html "$@" docs docs/_build/html
echo "docs built: docs/_build/html/index.html"
