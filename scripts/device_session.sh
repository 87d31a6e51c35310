#!/usr/bin/env bash
# One lent GPU session as one command (docs/device.md). On the device machine:
#     bash scripts/device_session.sh                 # carry: .whl .device; timeout_s 540
# Installs the carried wheels (.whl/, made by scripts/device_prepare.sh) when a package they hold
# is missing, then runs `python -m bench.device_session` (any arguments are passed on to it); its
# output also goes to $OUT/device_session.log. Here, without a GPU, the same flow at toy scale:
#     PYTHON=.venv/bin/python OUT=/tmp/out bash scripts/device_session.sh --device cpu --profile smoke ...
set -uo pipefail
t0=$(date +%s)
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
  exec > >(tee -a "$OUT/device_session.log") 2>&1
fi
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  if "$PY" -c "import laplace, backpack, curvlinops, asdl, unfoldNd, einconv, pytest" 2>/dev/null; then
    export DEVICE_SESSION_WHEELS="not installed: their packages are already importable"
  else
    n=$(ls .whl/*.whl | wc -l)
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
      export DEVICE_SESSION_WHEELS="installed $n wheel(s) from .whl into /tmp/site in $(( $(date +%s) - t0 )) s: $(cd .whl && ls *.whl | tr '\n' ' ')"
    else
      echo "device_session.sh: installing the wheels in .whl failed" >&2
      exit 3
    fi
  fi
else
  export DEVICE_SESSION_WHEELS="none carried (no .whl/*.whl)"
fi
echo "device_session.sh: wheels: $DEVICE_SESSION_WHEELS"
"$PY" -m bench.device_session --started-at "$t0" "$@"
rc=$?
echo "device_session.sh: exit $rc after $(( $(date +%s) - t0 )) s"
exit $rc
