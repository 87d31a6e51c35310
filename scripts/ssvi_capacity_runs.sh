#!/usr/bin/env bash
# The SSVI capacity experiment (docs/ssvi.md "CIFAR-10"): SSVI at 10 % against its own dense model
# (density 1: the same estimator, prior, initialisation and optimisers) on a fixed 10,000-image
# CIFAR-10 training subset, at 12 / 36 / 72 epochs (each budget its own cosine schedule), seeds 0-2,
# on resnet_small and on resnet_small_x2 (twice as wide); then the official code's sigma optimiser
# (SGD with momentum 0.9 at 0.01) as the control on resnet_small. A gap that closes with the budget
# is convergence; one that stays or grows, and narrows on the wider network, is capacity.
# Seeds run one at a time across both networks, so a stopped run leaves whole seeds. Resumable:
# finished cells are skipped. OUT (default results) is the results folder; SEEDS (default "0 1 2");
# the shift sets are evaluated on 200 images a cell (the question is clean accuracy). Keep with
#   .venv/bin/python scripts/keep_records.py save cifar10c --results $OUT --archive docs/ablations
# and the table then comes from .venv/bin/python benchmarks/ssvi_capacity.py --results docs/ablations
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-results}
# SSVI's options chosen on CIFAR-10-C by bench tune (kept in docs/tuning; TUNING overrides)
T=$(.venv/bin/python scripts/tuned_options.py ${TUNING:-docs/tuning} cifar10c quick ssvi resnet_small)
C=".venv/bin/python -m bench run --suite cifar10c --profile quick --methods ssvi --data-root ${DATA_ROOT:-data} --no-report --out $OUT
   --set data.n_train=10000 --set data.n_per_cell=200 --set ssvi.density=0.1,1.0 --set ssvi.epochs=12,36,72 $T"
for seed in ${SEEDS:-0 1 2}; do
  for model in ${MODELS:-resnet_small resnet_small_x2}; do
    $C --seeds "$seed" --set models="$model"
  done
done
for seed in ${SEEDS:-0 1 2}; do
  $C --seeds "$seed" --set models=resnet_small --set ssvi.rho_optimizer=sgd
done
