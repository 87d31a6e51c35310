#!/usr/bin/env bash
# The runs behind the VDP++ tables of docs/vdp.md (mnist_noise, quick profile, LeNet-300-100,
# seeds 0-2). Resumable: finished cells are skipped. The KL weight is chosen on the validation
# split (bench/selection.py) from the sweep, and the ablations and controls run at that value.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
export OUT=${OUT:-results}
R=".venv/bin/python -m bench run --suite mnist_noise --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT --set models=lenet_300_100"
# 1. the KL weight of Sec. 5, swept and chosen on validation (the defaults otherwise)
$R --methods vdp --set vdp.kl_weight=0.00001,0.0001,0.001,0.01,0.1,1
K=$(.venv/bin/python scripts/chosen_on_validation.py $OUT mnist_noise vdp kl_weight lenet_300_100 5)
echo "kl_weight chosen on validation: $K"
# 2. ablations at the chosen KL weight: eq. 11's Gaussian (no floor, and the old 1e-2 floor), bare
#    cross-entropy, one sigma per weight, rho at the means' rate (sigma set by the schedule)
$R --methods vdp --set vdp.kl_weight=$K --set vdp.likelihood=gaussian --set vdp.var_floor=0,0.01
$R --methods vdp --set vdp.kl_weight=$K --set vdp.ce_variance_term=false
$R --methods vdp --set vdp.kl_weight=$K --set vdp.sigma_per=weight
$R --methods vdp --set vdp.kl_weight=$K --set vdp.rho_lr=0.001
# 3. controls: the deterministic network with VDP++'s optimiser, rate and (cross-entropy) loss, the
#    shared SGD MAP network, and mean-field VI at the configuration `bench tune` chose for it among
#    passing fits on rotated MNIST: the same training images and the same clean validation split, so
#    the same choice (kept in docs/tuning; TUNING overrides; exit 2 if made at another budget)
$R --methods deterministic --set deterministic.optimizer=adam --set deterministic.lr=0.001 --set deterministic.weight_decay=0
$R --methods deterministic
M=$(.venv/bin/python scripts/tuned_options.py ${TUNING:-docs/tuning} mnist_rotated quick mfvi lenet_300_100)
echo "mean-field VI at: $M"
$R --methods mfvi $M

# 4. CIFAR-10 (cifar10_noise, resnet_small, seeds 0-2): the shared SGD MAP network, the Adam control and
#    the KL weight swept over four decades and chosen on validation the same way (docs/vdp.md, "CIFAR-10")
[ "${CIFAR:-1}" = 0 ] && exit 0
C=".venv/bin/python -m bench run --suite cifar10_noise --profile quick --data-root ${DATA_ROOT:-data} --no-report --out $OUT"
for s in 0 1 2; do
  $C --seeds $s --methods deterministic
  $C --seeds $s --methods deterministic --set deterministic.optimizer=adam --set deterministic.lr=0.001 --set deterministic.weight_decay=0
  $C --seeds $s --methods vdp --set vdp.kl_weight=0.0001,0.01,1
done
