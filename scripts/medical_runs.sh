#!/usr/bin/env bash
# The runs behind the binary-segmentation rows of docs/results/medical.md (camvid_binary, quick
# profile, seeds 0-2): the MAP network, PBN at 1 % and the three single-option changes the claims
# compare it with (squared saliency, median-frequency class weights, 20 % Bayesian), its two controls
# (fine-tuning only, a random subnetwork), full VI and
# the 5-member ensemble, then the multi-label rows (MULTILABEL=0 skips them). Resumable: finished cells are skipped, and every command after the first
# reuses the MAP networks of the same results folder. OUT (default results) is the results folder.
# The KL weights of PBN and mean-field VI on camvid_binary's quick profile are bench tune's choices,
# written into bench/suites/camvid_binary.py (tests/test_camvid_binary.py ties them to the kept tunes):
# after a change of the suite's space or validation split, run
#   .venv/bin/python -m bench tune --suite camvid_binary --profile quick --methods pbn,mfvi --set seeds=0
# first and move the profile's weights to its choices.
# Keep the records with
#   .venv/bin/python scripts/keep_records.py save camvid_binary --results $OUT --archive docs/records
# and the tables then come from .venv/bin/python benchmarks/refresh_tables.py docs/results/medical.md
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-results}
B=".venv/bin/python -m bench run --suite camvid_binary --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT"
$B --methods deterministic,pbn                          # claims S5, S7, S8: PBN 1 % and its MAP network
$B --methods pbn --set pbn.squared=true                 # S8: squared-gradient saliency
$B --methods pbn --set pbn.n_bayes=0                    # C3: the same pipeline with no stochastic weight
$B --methods pbn --set pbn.criterion=random             # C4: a random subnetwork of the same size
.venv/bin/python -m bench tune --suite camvid_binary --profile quick --methods pbn --set seeds=0 \
    --set pbn.class_weights=median_frequency --data-root ${DATA_ROOT:-data} --out $OUT   # S7's own KL weight
$B --methods pbn --set pbn.class_weights=median_frequency   # S7: the paper's class-weighted ELBO at the
        # profile's (unweighted) KL weight; where its own tune chose another, S7's line names the command
$B --methods pbn --set pbn.r_bayes=0.2                  # S5: 20 % Bayesian
$B --methods deep_ensemble                              # S1, S3, S6
$B --methods mfvi                                       # S2, S4: the fully Bayesian network
# the multi-label rows (camvid_multilabel, quick profile: every network starts from the camvid MAP UNet of
# seed 0, which the first command makes in $OUT): claims M1-M9; keep with
#   .venv/bin/python scripts/keep_records.py save camvid_multilabel --results $OUT --archive docs/records
[ "${MULTILABEL:-1}" = 1 ] || exit 0
M=".venv/bin/python -m bench run --suite camvid_multilabel --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT"
$M --methods deterministic,pbn,mfvi,deep_ensemble       # M1-M7
$M --methods pbn --set pbn.r_bayes=0.2                  # M8, M9: 20 % Bayesian
