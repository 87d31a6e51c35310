#!/usr/bin/env bash
# The CamVid rerun of docs/results/camvid.md: the camvid quick grid again on the test-like validation
# split (CamVid's training drive 0006R0 moved beside the published validation frames) at 30 epochs,
# where the 12-epoch networks were short. Its records are kept in docs/records-rerun as they finish;
# no table reads them until every row has its seeds.
#
#   bash scripts/camvid_rerun.sh restore   # docs/records-rerun -> $OUT (never over a record there)
#   bash scripts/camvid_rerun.sh A         # untuned methods, then the tunes and seeds 1-2 of mc_dropout, mfvi, pbn
#   bash scripts/camvid_rerun.sh B         # the tunes and seeds 1-2 of vdp and ssvi (a second core)
#   bash scripts/camvid_rerun.sh save      # $OUT -> docs/records-rerun (finished cells and the MAP networks)
#   bash scripts/camvid_rerun.sh status    # what A and B have left, cell by cell (bench run/tune --plan; runs nothing)
#
# A and B run side by side on two cores (one thread each) and resume: a finished cell is skipped, a
# training stopped midway continues from its last epoch (checkpoints under $OUT). A tuned method is
# tuned on seed 0 (bench tune --validation-first: the candidates not chosen are scored on the
# validation and clean test frames only) and its choice fitted one step past every end of its space it
# sits at (--probe-edges), its candidates whose records predate a check refitted first (--redo-predating:
# the VI candidates fitted before vi_converged existed), then runs seeds 1-2 at its choice
# (scripts/tuned_options.py; none when no candidate passes its checks). OUT (default results-camvid-rerun) is the results folder,
# DATA_ROOT (default data) the data root.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-results-camvid-rerun}
ARCHIVE=docs/records-rerun
PY=.venv/bin/python
S=(--set "data.val_sequences=[0006R0]" --set train.epochs=30)
RUN=(--suite camvid --profile quick --data-root "${DATA_ROOT:-data}" --out "$OUT" --threads 1 --quiet)
UNTUNED=deterministic,temperature_scaling,laplace_last_layer,laplace_diag,subnet_laplace,deep_ensemble

tune() { $PY -m bench tune "${RUN[@]}" --methods "$1" "${S[@]}" --set seeds=0 --validation-first --probe-edges --redo-predating "${@:2}"; }
seeds12() {
  local chosen
  if ! chosen=$($PY scripts/tuned_options.py "$OUT" camvid quick "$1" unet_small "${S[@]}"); then
    echo "camvid_rerun: no valid choice for $1 (above): its seeds 1-2 are not run"
    return 0
  fi
  # shellcheck disable=SC2086  # the --set words of the choice
  $PY -m bench run "${RUN[@]}" --methods "$1" --seeds 1,2 "${S[@]}" $chosen --no-report --redo-predating "${@:2}"
}

case "${1:-}" in
  restore) $PY scripts/keep_records.py restore camvid --results "$OUT" --archive "$ARCHIVE" ;;
  save)  # the finished cells, and the MAP networks they stand on (a later session elsewhere pairs with them)
    $PY scripts/keep_records.py save camvid --results "$OUT" --archive "$ARCHIVE"
    if compgen -G "$OUT/camvid/checkpoints/map/*/*/seed*.pt" >/dev/null; then  # a finished MAP network
      $PY scripts/keep_records.py save-maps camvid --results "$OUT" --archive "$ARCHIVE"
    fi ;;
  A)
    bash scripts/ensure_venv.sh
    $PY -m bench run "${RUN[@]}" --methods "$UNTUNED" "${S[@]}" --no-report --redo-predating
    for m in mc_dropout mfvi pbn; do tune "$m"; done
    for m in mc_dropout mfvi pbn; do seeds12 "$m"; done ;;
  B)
    bash scripts/ensure_venv.sh
    for m in vdp ssvi; do tune "$m"; done
    for m in vdp ssvi; do seeds12 "$m"; done ;;
  status)
    $PY -m bench run "${RUN[@]}" --methods "$UNTUNED" "${S[@]}" --redo-predating --plan
    for m in mc_dropout mfvi pbn vdp ssvi; do tune "$m" --plan; done
    for m in mc_dropout mfvi pbn vdp ssvi; do seeds12 "$m" --plan; done ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
