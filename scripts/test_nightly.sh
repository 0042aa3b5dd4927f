#!/usr/bin/env bash
# The tests and doctests, then the benchmarks as a smoke test, against TorchRL's and TensorDict's
# nightlies (torchrl-nightly, tensordict-nightly from the package index), run as scripts/test.sh
# runs them. Everything else is pinned by constraints.txt, as in .venv. The environment is its
# own (.venv-nightly, or $NIGHTLY_VENV), built with plain pip and refreshed to the newest nightlies
# on every run. Arguments, if any, replace the test run: scripts/test_nightly.sh test/data -x
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$(realpath -m "${NIGHTLY_VENV:-.venv-nightly}")"
extras="test,examples,hydra,ray"
step() { printf '\n=== %s\n' "$*"; }

step "venv $venv: torchrl-nightly, tensordict-nightly, the package and its [$extras] extras"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
python="$venv/bin/python"
pip=("$python" -m pip install -q --disable-pip-version-check)
"$python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
# The nightlies install the same modules under other distribution names, so the package goes in
# without its dependencies; the ones it declares, bar torchrl and tensordict, follow (pip then
# reports torchrl and tensordict as missing: the nightlies provide them).
"${pip[@]}" --no-deps -e .
mapfile -t requirements < <("$python" - "$extras" <<'EOF'
import re
import sys
from importlib import metadata

extras = set(sys.argv[1].split(","))
for requirement in metadata.requires("torchrl_ext") or []:
    spec, _, marker = requirement.partition(";")
    name = re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower()
    wanted = re.findall(r'extra\s*==\s*"([^"]+)"', marker)
    if name not in ("torchrl", "tensordict") and (not marker.strip() or extras & set(wanted)):
        print(spec.strip())
EOF
)
"${pip[@]}" -c constraints.txt "${requirements[@]}"
"${pip[@]}" -c constraints.txt --upgrade torchrl-nightly tensordict-nightly

export PATH="$venv/bin:$PATH"
export PYTHONHASHSEED=0
python - <<'EOF'
from importlib import metadata

for name in ("torch", "torchrl-nightly", "tensordict-nightly", "warp-lang"):
    print(f"{name} {metadata.version(name)}")
EOF
if [ "$#" -gt 0 ]; then
  step "pytest $*"
  python -m pytest -p no:cacheprovider "$@"
  exit
fi
step "pytest (tests + doctests)"
python -m pytest -q test torchrl_ext examples --doctest-modules -p no:cacheprovider
step "benchmarks (smoke, --benchmark-disable)"
python -m pytest -q benchmarks --benchmark-disable -p no:cacheprovider
