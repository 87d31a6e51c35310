#!/usr/bin/env bash
# The runs behind the Laplace tables of docs/subnet_laplace.md and docs/results/mnist_rotated.md
# (quick profile). Resumable: finished cells are skipped. On 2 cores run two of the blocks at a time
# (each with OMP_NUM_THREADS=1). OUT (default results) is the results folder; OTHERS=0 stops after the
# LeNet-300-100 blocks (cifar10c's ResNet and LeNet-5 follow otherwise). Keep the records with
#   .venv/bin/python scripts/keep_records.py save mnist_rotated --results $OUT --archive docs/ablations
# and the tables then come from .venv/bin/python benchmarks/refresh_tables.py
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-results}
B=".venv/bin/python -m bench run --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT"
CRITERIA="subnet_laplace.criterion=wasserstein,random,wasserstein_diag_laplace,magnitude,gradient"
L="$B --suite mnist_rotated --set models=lenet_300_100"
# LeNet-300-100: the criteria at 1,000 weights (0.375 %), the baselines, SWAG's snapshot interval
$L --seeds 0,1,2,3,4 --methods subnet_laplace --set $CRITERIA
$L --seeds 0,1,2,3,4 --methods deterministic,laplace_diag,laplace_last_layer
$L --seeds 0,1,2,3,4 --methods subnet_laplace --set subnet_laplace.swag_snapshot_every=20
# the size sweep: Wasserstein against a random subnet of the same size
$L --seeds 0,1,2 --methods subnet_laplace --set subnet_laplace.n_subnet=100,300,3000 --set subnet_laplace.criterion=wasserstein,random
# selection criterion x inference scheme: the same 1,000-weight subnets under PBN's partial VI at its
# fine-tuning rate chosen on validation (the kept sweep of scripts/vi_runs.sh, docs/pbn.md), and PBN's
# pipeline with no stochastic weight as the control
LR=$(.venv/bin/python scripts/chosen_on_validation.py docs/ablations mnist_rotated pbn lr lenet_300_100 2)
echo "PBN fine-tuning rate chosen on validation: $LR"
$L --seeds 0,1,2,3,4 --methods pbn --set pbn.n_bayes=1000 --set pbn.lr=$LR \
   --set pbn.criterion=gradient,random,magnitude,wasserstein,wasserstein_diag_laplace
$L --seeds 0,1,2,3,4 --methods pbn --set pbn.n_bayes=0 --set pbn.lr=$LR
[ "${OTHERS:-1}" = 0 ] && exit 0
# cifar10c's ResNet and LeNet-5 at the paper's fraction, SWAG with a snapshot every 20 steps
$B --suite cifar10c --seeds 0,1,2,3,4 --methods deterministic
$B --suite cifar10c --seeds 0,1,2,3,4 --methods subnet_laplace --set subnet_laplace.subnet_fraction=0.0038 \
   --set subnet_laplace.swag_snapshot_every=20 --set $CRITERIA
$B --suite mnist_rotated --set models=lenet5 --seeds 0,1,2,3,4 --methods subnet_laplace --set subnet_laplace.subnet_fraction=0.0038 \
   --set subnet_laplace.swag_snapshot_every=20 --set $CRITERIA
$B --suite mnist_rotated --set models=lenet5 --seeds 0,1,2,3,4 --methods deterministic,laplace_diag,laplace_last_layer
$B --suite cifar10c --seeds 0,1,2,3,4 --methods laplace_last_layer,laplace_diag
