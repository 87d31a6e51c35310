#!/usr/bin/env bash
# Fill, here, the git-excluded folders a device call carries (docs/device.md), then print that call.
#     bash scripts/device_prepare.sh               # wheels (pip download from PyPI) + data + commit
#     bash scripts/device_prepare.sh --no-wheels   # keep .whl/ as it is (no network)
#   .whl/     the packages the device image lacks (laplace-torch, pytest and what they need), as wheels, at the
#             versions pinned in pyproject.toml (the others at the versions in .venv)
#   .device/  data/{MNIST,FashionMNIST-test}.tar.xz + MD5SUMS copied from ../shared/data, and
#             commit.txt (the device gets no .git: the records it writes name this commit)
# Both are listed in .git/info/exclude. Fails (exit 1) when what travels would pass 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BENCH_SHARED_DATA:-../shared/data}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
wheels=1
for arg in "$@"; do
  case "$arg" in
    --no-wheels) wheels=0 ;;
    *) echo "device_prepare.sh: unknown option $arg (valid: --no-wheels)" >&2; exit 2 ;;
  esac
done
mkdir -p .git/info && touch .git/info/exclude
for p in /.whl/ /.device/; do grep -qxF "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done

# the wheels: laplace-torch's needs that the device image does not hold (docs/device.md)
if [ "$wheels" = 1 ]; then
  specs=$("$PY" - <<'PY'
import re, tomllib
from importlib.metadata import version
pins = {}
for dep in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    m = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^;\s]+)", dep)
    if m:
        pins[m.group(1).lower()] = m.group(2)
need = ["laplace-torch", "asdfghjkl", "backpack-for-pytorch", "curvlinops-for-pytorch", "unfoldNd", "einconv",
        # pytest -m cuda (bench.device_session) and what it needs
        "pytest", "pluggy", "iniconfig", "pygments", "packaging"]
print(" ".join(f"{n}=={pins.get(n.lower()) or version(n)}" for n in need))
PY
)
  echo "device_prepare.sh: downloading $specs"
  rm -rf .tmp-whl && mkdir .tmp-whl
  # the flags of the device README (/work/.library/device/README.md): the device's python3 is 3.12
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .tmp-whl $specs
  rm -rf .whl && mv .tmp-whl .whl
fi
[ -d .whl ] || echo "device_prepare.sh: warning: no .whl/ (run without --no-wheels once): the device lacks laplace-torch" >&2

# the data archives and the commit
mkdir -p .device/data
for a in MNIST.tar.xz FashionMNIST-test.tar.xz MD5SUMS; do
  [ -f "$SHARED/$a" ] || { echo "device_prepare.sh: no $SHARED/$a (set BENCH_SHARED_DATA)" >&2; exit 2; }
  cmp -s "$SHARED/$a" ".device/data/$a" || install -m 0644 "$SHARED/$a" ".device/data/$a"
done
commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit+dirty"
echo "$commit" > .device/commit.txt

# what travels: tracked + untracked-not-ignored files, and the carried folders
# (a tracked file deleted here does not travel: stat skips it)
tree=$({ git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}')
carried=$(find .whl .device -type f -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}')
total=$((tree + carried))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "device_prepare.sh: tree $(mib "$tree") + .whl/.device $(mib "$carried") = $(mib "$total") of 64 MiB"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "device_prepare.sh: over the 64 MiB a device call carries" >&2; exit 1
fi
cat <<CALL

The device call (one command; it writes summary.json, records.tar.gz and device_session.log to \$OUT):
  run(command="bash scripts/device_session.sh --budget-s 480", carry=[".whl", ".device"], timeout_s=540)
Then, here:
  .venv/bin/python scripts/keep_records.py merge <files_at>/records.tar.gz
CALL
