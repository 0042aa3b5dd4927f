# Sourced by the two top-level commands: create .venv (once) and install the project with the
# extras the caller names, at the exact versions of constraints.txt. Uses plain pip (so a torch
# wheel pip finds locally is picked up as usual).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
extras="${1:-all}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[${extras}]"
export PATH="$root/.venv/bin:$PATH"
