#!/usr/bin/env bash
# The Laplace family where the subnetwork's attainable variance can show (docs/subnet_laplace.md,
# "A setting that can test the claim"): rotated MNIST, LeNet-300-100, a fixed 1,500-image training set
# (data.n_train) so that the 1,000-weight subnetwork has s / N = 0.67 (Daxberger et al.'s ResNet-18
# setting: about 0.7; on the full 50,000 images s / N = 0.02 and every subnetwork Laplace is MAP by
# construction: bench.validity's laplace_attainable_variance), 60 epochs so that the MAP network on
# the small set converges. Every selection criterion at the same size, the random subnetwork among
# them as the control, beside MAP, its temperature, the diagonal and the last-layer Laplace.
# Resumable: finished cells are skipped. OUT (default results) is the results folder. Keep with
#   .venv/bin/python scripts/keep_records.py save mnist_rotated --results $OUT --archive docs/ablations
# and the tables come from benchmarks/laplace_tables.py --where data.n_train=1500,train.epochs=60
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-results}
L=".venv/bin/python -m bench run --suite mnist_rotated --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT
   --set models=lenet_300_100 --set data.n_train=1500 --set train.epochs=60 --seeds ${SEEDS:-0,1,2}"
$L --methods deterministic,temperature_scaling,laplace_last_layer,laplace_diag
$L --methods subnet_laplace --set subnet_laplace.criterion=wasserstein,random,wasserstein_diag_laplace,magnitude,gradient
# selection criterion x inference scheme at 1,000 weights: the same subnets under PBN's partial VI at the
# options bench tune chose on the full training set (docs/tuning; TUNING overrides), and PBN's pipeline
# with no stochastic weight as the control (benchmarks/laplace_tables.py --table schemes)
T=$(.venv/bin/python scripts/tuned_options.py ${TUNING:-docs/tuning} mnist_rotated quick pbn lenet_300_100)
$L --methods pbn $T --set pbn.n_bayes=1000 --set pbn.criterion=gradient,random,magnitude,wasserstein,wasserstein_diag_laplace
$L --methods pbn $T --set pbn.n_bayes=0
# the subnet size at equal N: Wasserstein against a random subnet of the same size (s / N 0.07, 0.2, 2)
$L --methods subnet_laplace --set subnet_laplace.n_subnet=100,300,3000 --set subnet_laplace.criterion=wasserstein,random
