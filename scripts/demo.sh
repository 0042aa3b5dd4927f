#!/usr/bin/env bash
# The main job. Until the end-to-end demo lands, it runs every tutorial script in turn.
set -euo pipefail
source "$(dirname "$0")/venv.sh" all
for t in tutorials/*.py; do
  printf '\n=== %s\n' "$t"
  python "$t"
done
