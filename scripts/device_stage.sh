#!/usr/bin/env bash
# Run on the device machine by a stage call that scripts/device_prepare.sh printed: moves the archive
# parts of the carried folder(s) into .device-staged/ (ignored by git here, so the tree's next copy
# leaves it in place while the machine is held), where the session call finds them.
#     bash scripts/device_stage.sh .device-stage-1
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "device_stage.sh: name the carried folder(s), e.g. .device-stage-1" >&2; exit 2; }
mkdir -p .device-staged
for d in "$@"; do
  [ -d "$d" ] || { echo "device_stage.sh: no folder $d (carry it: carry=[\"$d\"])" >&2; exit 2; }
  cp -f "$d"/* .device-staged/
done
ls -l .device-staged
