#!/usr/bin/env bash
# The quick-profile runs behind the Tiny-ImageNet-C and CamVid tables (issues 14 and 15).
# Resumable: finished cells are skipped. On 2 cores run two of the blocks at a time (each with
# OMP_NUM_THREADS=1); then
#   .venv/bin/python scripts/keep_records.py save tinyimagenetc camvid
#   .venv/bin/python benchmarks/refresh_tables.py README.md
# The records made so far are kept in git (docs/records, scripts/keep_records.py; the README's
# tables read them there): they are restored first, so a grid longer than a machine's life goes on
# where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_venv.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
for suite in tinyimagenetc camvid; do
  if [ -d docs/records/$suite ]; then .venv/bin/python scripts/keep_records.py restore $suite; fi
done
B=".venv/bin/python -m bench run --profile quick --data-root ${DATA_ROOT:-data} --no-report"
# Tiny-ImageNet-C (generated once from the test part, ~4 min): every classification method, seeds 0-2
$B --suite tinyimagenetc --seeds 0,1,2 --methods deterministic,mc_dropout,deep_ensemble,laplace_last_layer,temperature_scaling
$B --suite tinyimagenetc --seeds 0,1,2 --methods pbn,mfvi,ssvi,vdp
# VDP++'s KL weight is its key hyperparameter (docs/vdp.md): swept, chosen on validation with
#   .venv/bin/python -m bench select --suite tinyimagenetc --method vdp --tune kl_weight
$B --suite tinyimagenetc --seeds 0,1,2 --methods vdp --set vdp.kl_weight=0.0001,0.01
# 200 classes: the linearised predictives of these two drawn by Jacobian-vector products (glm_sampler=jvp)
$B --suite tinyimagenetc --seeds 0,1,2 --methods subnet_laplace,laplace_diag
# CamVid under CamVid-C (quick: 120 x 160, 12 epochs): every method that supports segmentation,
# seed 0 of every method first (cheapest first; the deep ensemble trains 4 more UNets; the weight-space
# Laplace variants draw 10 linearised predictives by JVPs per image), then seeds 1-2
CAMVID=deterministic,laplace_last_layer,temperature_scaling,pbn,mc_dropout,vdp,ssvi,mfvi,deep_ensemble,laplace_diag,subnet_laplace
$B --suite camvid --seeds 0 --methods $CAMVID
$B --suite camvid --seeds 1,2 --methods $CAMVID
# VDP++'s KL weight on CamVid too (the same sweep and choice as on Tiny-ImageNet-C):
#   .venv/bin/python -m bench select --suite camvid --method vdp --tune kl_weight
$B --suite camvid --seeds 0,1,2 --methods vdp --set vdp.kl_weight=0.0001,0.01
# VDP++ trains its means with Adam at 1e-3 without weight decay (docs/vdp.md), the grid's MAP network
# with SGD: the deterministic UNet with VDP++'s optimiser is the control that separates the two
$B --suite camvid --seeds 0,1,2 --methods deterministic --set deterministic.optimizer=adam --set deterministic.lr=0.001 --set deterministic.weight_decay=0
