"""Where a paper-budget training step of a LeNet spends its time on a device: the harness's loop
(bench.training.train_model over a bench.data.TensorLoader) against a bare loop, on random data of
MNIST's shape (timings do not depend on the values). Run on a lent GPU (docs/device.md):

    python3 scripts/profile_train_step.py --device cuda --steps 3000 [--model lenet5] [--tag alone]
    for i in $(seq 8); do OMP_NUM_THREADS=2 python3 scripts/profile_train_step.py --tag p$i & done; wait

Prints and writes to $OUT (``profile_<model>_<device>[_<tag>].json``) milliseconds per step of:
``harness_cpu_data_ms`` (the loader gathering batches on the host and copying each to the device),
``harness_device_data_ms`` (the loader given tensors already on the device), ``bare_device_data_no_sync_ms``
(data on the device, the loss summed there, no read on the host) and ``bare_device_data_item_ms``
(the same with ``loss.item()`` every step); on CUDA also torch.profiler's table of a 300-step
harness run (self CPU time first). Each is timed after a warm-up of a tenth of the steps. The
2026-11-28 measurements on an H200 are kept in docs/records/device/profiles/ (they were taken with
the loop and loader of commit 5165b54, before the loss was read only every 50 steps and the
loader kept its data on the device).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.data import TensorLoader  # noqa: E402
from bench.models import build_model  # noqa: E402
from bench.tasks import classification  # noqa: E402
from bench.training import TrainConfig, make_optimizer, nll_loss, train_model  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--model", default="lenet_300_100", choices=("lenet_300_100", "lenet5"))
    p.add_argument("--batch-size", type=int, default=50, help="the paper profile's (PBN paper, Appendix H.2.1)")
    p.add_argument("--tag", default="", help="added to the output's name (processes run side by side)")
    a = p.parse_args(argv)
    dev, steps, B = torch.device(a.device), a.steps, a.batch_size
    task = classification(10)
    x, y = torch.randn(steps * B, 1, 28, 28), torch.randint(0, 10, (steps * B,))
    cfg = TrainConfig(epochs=1, batch_size=B, lr=0.01, momentum=0.9, weight_decay=1e-5)
    out = {"device": str(dev), "steps": steps, "model": a.model, "batch_size": B, "tag": a.tag,
           "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "threads": torch.get_num_threads(), "torch": torch.__version__}

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def timed(fn) -> float:
        fn(max(1, steps // 10))  # warm-up
        sync()
        t = time.perf_counter()
        fn(steps)
        sync()
        return (time.perf_counter() - t) / steps * 1e3

    def harness(k, xs=x, ys=y):
        m = build_model(a.model, (1, 28, 28), 10).to(dev)
        train_model(m, TensorLoader(xs[:k * B], ys[:k * B], B, seed=0, device=dev), cfg, nll_loss(task))

    def bare(k, item, xs, ys):
        m = build_model(a.model, (1, 28, 28), 10).to(dev)
        opt = make_optimizer(m.parameters(), cfg)
        order = torch.randperm(k * B, device=dev)
        running = torch.zeros((), device=dev)
        for i in range(k):
            idx = order[i * B:(i + 1) * B]
            loss = task.loss(m(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item() if item else loss.detach()

    out["harness_cpu_data_ms"] = timed(harness)
    xd, yd = x.to(dev), y.to(dev)
    out["harness_device_data_ms"] = timed(lambda k: harness(k, xd, yd))
    out["bare_device_data_no_sync_ms"] = timed(lambda k: bare(k, False, xd, yd))
    out["bare_device_data_item_ms"] = timed(lambda k: bare(k, True, xd, yd))
    table = None
    if dev.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            harness(min(steps, 300))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)
        out["profile_harness_cpu_data"] = table
    print(json.dumps({k: v for k, v in out.items() if k != "profile_harness_cpu_data"}, indent=1))
    if table:
        print(table)
    if os.environ.get("OUT"):
        d = Path(os.environ["OUT"])
        d.mkdir(parents=True, exist_ok=True)
        name = f"profile_{a.model}_{dev.type}" + (f"_{a.tag}" if a.tag else "") + ".json"
        (d / name).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
