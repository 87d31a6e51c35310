#!/usr/bin/env bash
# Fill, here, the git-excluded folders a device call carries (docs/device.md), then print that call.
#     bash scripts/device_prepare.sh               # wheels (pip download from PyPI) + data + commit
#     bash scripts/device_prepare.sh --no-wheels   # keep .whl/ as it is (no network)
#     bash scripts/device_prepare.sh --data CamVid-240x180 -- --suite camvid_binary --profile quick ...
#   .whl/     the packages the device image lacks (laplace-torch, pytest and what they need), as wheels, at the
#             versions pinned in pyproject.toml (the others at the versions in .venv)
#   .device/  data/: the archives of --data (default MNIST,FashionMNIST-test) from ../shared/data with their
#             checksums (MD5SUMS, SHA256SUMS-<name>), and commit.txt (the device gets no .git: the records
#             it writes name this commit); partial/: the partial fits earlier calls sent back
#             (keep_records.py merge), which the session resumes, as many as the room the data leaves holds (the
#             most training seconds first)
#   .device-held/partial/  the partial fits that did not fit this call, not carried (the next prepare tries again)
#   .device-stage-<k>/  an archive too large to travel beside the tree, in parts (with .device/data/parts.json),
#             one folder per earlier call that stages it there (scripts/device_stage.sh)
# Arguments after -- are added to the printed session command. All are listed in .git/info/exclude.
# Fails (exit 1) when what a call carries would pass 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BENCH_SHARED_DATA:-../shared/data}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
wheels=1
data="MNIST,FashionMNIST-test"
session_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-wheels) wheels=0 ;;
    --data) shift; data=${1:?--data needs archive names, e.g. CamVid-240x180} ;;
    --data=*) data=${1#--data=} ;;
    --) shift; session_args=("$@"); break ;;
    *) echo "device_prepare.sh: unknown option $1 (valid: --no-wheels, --data NAME[,NAME], -- SESSION ARGS)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p .git/info && touch .git/info/exclude
for p in /.whl/ /.device/ '/.device-stage-*/' /.device-staged/ /.device-held/; do
  grep -qxF "$p" .git/info/exclude || echo "$p" >> .git/info/exclude
done

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

# the data archives (whole, or in parts for earlier calls to stage) and the commit
tree=$({ git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}')
rm -rf .device/data .device-stage-*
mkdir -p .device/data
"$PY" - "$SHARED" "$data" "$tree" <<'PY'
import hashlib, json, os, shutil, sys
from pathlib import Path

shared, names, tree = Path(sys.argv[1]), [n for n in sys.argv[2].split(",") if n], int(sys.argv[3])
LIMIT = int(float(os.environ.get("BENCH_DEVICE_CARRY_MIB", "64")) * 2**20)  # a test sets a smaller one
MARGIN = min(2**20, LIMIT // 64)
dest = Path(".device/data")
for n in names:
    if not (shared / f"{n}.tar.xz").is_file():
        have = sorted(p.name[:-7] for p in shared.glob("*.tar.xz"))
        sys.exit(f"device_prepare.sh: no {shared}/{n}.tar.xz (have: {', '.join(have)}; set BENCH_SHARED_DATA)")
for f in ["MD5SUMS", *(f"SHA256SUMS-{n}" for n in names)]:
    if (shared / f).is_file():
        shutil.copyfile(shared / f, dest / f)
wheels = sum(p.stat().st_size for p in Path(".whl").glob("*") if p.is_file())
room = LIMIT - tree - wheels - sum(p.stat().st_size for p in dest.iterdir()) - MARGIN  # the session's call
stage_room = LIMIT - tree - MARGIN  # each staging call carries the tree and one folder of parts
if stage_room <= 0:
    sys.exit("device_prepare.sh: the tree alone leaves no room for data in a call")
parts, folder, used = {}, 1, 0
for n in names:
    src, size = shared / f"{n}.tar.xz", (shared / f"{n}.tar.xz").stat().st_size
    if size <= room:
        shutil.copyfile(src, dest / src.name)
        room -= size
        continue
    digest, entry, left = hashlib.sha256(), [], size
    with open(src, "rb") as fh:
        while left > 0:
            name = f"{n}.tar.xz.part{len(entry) + 1:02d}"
            if left <= room:  # the rest travels with the session call
                block, out = fh.read(left), dest / name
                room -= len(block)
            else:  # a stage call's share
                if used >= stage_room:
                    folder, used = folder + 1, 0
                block = fh.read(min(stage_room - used, left - max(room, 0)))
                out = Path(f".device-stage-{folder}") / name
                out.parent.mkdir(exist_ok=True)
                used += len(block)
            out.write_bytes(block)
            digest.update(block)
            left -= len(block)
            entry.append(name)
    parts[n] = {"sha256": digest.hexdigest(), "bytes": size, "parts": entry}
if parts:
    (dest / "parts.json").write_text(json.dumps(parts, indent=1) + "\n")


# The partial fits earlier calls sent back (keep_records.py merge keeps them in .device/partial) travel in
# the room the data leaves, those holding the most training seconds first; the others wait, not carried,
# in .device-held/partial for a call with room (a training whose partial fit stays behind starts again
# there). Of two copies of one training (a held one, and a newer one a call sent back) the one of more
# seconds stays.
_seconds = {}


def seconds(path):
    if path not in _seconds:
        try:
            import torch
            state = torch.load(path, map_location="cpu", weights_only=True)
            value = float(state.get("train_seconds", float("nan"))) if isinstance(state, dict) else float("nan")
            _seconds[path] = value if value == value else 0.0  # NaN: the seconds are unknown
        except Exception:  # noqa: BLE001 - a file that does not load travels last
            _seconds[path] = -1.0
    return _seconds[path]


carried, held = Path(".device/partial"), Path(".device-held/partial")
copies = {}
for base in (carried, held):
    for f in sorted(base.rglob("*")) if base.is_dir() else []:
        if f.is_file():
            copies.setdefault(str(f.relative_to(base)), []).append(f)
chosen = {}
for rel, files in copies.items():
    best = max(files, key=seconds)
    for f in files:
        if f != best:
            f.unlink()
    chosen[rel] = best
room = max(room, 0)
n_carried = n_held = 0
for rel, f in sorted(chosen.items(), key=lambda kv: -seconds(kv[1])):
    size = f.stat().st_size
    fits = size <= room
    to = (carried if fits else held) / rel
    if fits:
        room, n_carried = room - size, n_carried + 1
    else:
        n_held += 1
    if to != f:
        to.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, to)
for base in (carried, held):  # the folders moves emptied
    for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) if base.is_dir() else []:
        if not any(d.iterdir()):
            d.rmdir()
if n_held:
    print(f"device_prepare.sh: {n_held} partial fit(s) held back in {held} (no room in this call; the call carries "
          f"{n_carried}, those of the most training seconds)")
PY
commit=$(git rev-parse HEAD)
# "+dirty" where the code differs, not the prose or the kept records (bench.provenance.NOT_CODE)
[ -z "$(git status --porcelain --untracked-files=no -- . ':(exclude)docs' ':(exclude)README.md')" ] || commit="$commit+dirty"
echo "$commit" > .device/commit.txt

# what each call carries: the tree (tracked + untracked-not-ignored files) and its folders
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
size_of() { { find "$@" -type f -printf '%s\n' 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}'; }
carried=$(size_of .whl .device)
total=$((tree + carried))
echo "device_prepare.sh: tree $(mib "$tree") + .whl/.device $(mib "$carried") = $(mib "$total") of ${BENCH_DEVICE_CARRY_MIB:-64} MiB"
limit=$(awk -v m="${BENCH_DEVICE_CARRY_MIB:-64}" 'BEGIN {printf "%d", m * 1048576}')
partial=$(size_of .device/partial)
[ "$partial" -eq 0 ] || echo "device_prepare.sh: .device/partial (partial fits to resume): $(mib "$partial") of it"
if [ "$total" -gt "$limit" ]; then
  echo "device_prepare.sh: over the ${BENCH_DEVICE_CARRY_MIB:-64} MiB a device call carries" >&2
  exit 1
fi
stages=()
for d in $(ls -d .device-stage-* 2>/dev/null | sort -t- -k3 -n); do
  stages+=("$d")
  echo "device_prepare.sh: $d: tree $(mib "$tree") + $(mib "$(size_of "$d")") of parts"
done
args=""
[ ${#session_args[@]} -eq 0 ] || args=" ${session_args[*]}"
echo
if [ ${#stages[@]} -gt 0 ]; then
  echo "The device calls, back to back (the machine keeps the staged parts only while it is held; idle 30 s, it"
  echo "is given back): first each stage call, then the session, which writes summary.json, records.tar.gz,"
  echo "maps-<k>.tar (the MAP networks it trained), partial-<k>.tar (stopped trainings) and device_session.log"
  echo "to \$OUT:"
  for d in "${stages[@]}"; do
    echo "  run(command=\"bash scripts/device_stage.sh $d\", carry=[\"$d\"], timeout_s=120)"
  done
else
  echo "The device call (one command; it writes summary.json, records.tar.gz, maps-<k>.tar, partial-<k>.tar and"
  echo "device_session.log to \$OUT):"
fi
cat <<CALL
  run(command="bash scripts/device_session.sh --budget-s 540$args", carry=[".whl", ".device"], timeout_s=590)
Then, here:
  .venv/bin/python scripts/keep_records.py merge <files_at>/*.tar*
CALL
