"""SSVI design check: dense materialisation vs torch.sparse for a sparse Linear layer on CPU.

One forward + backward (gradient to the k active mean values) of LeNet-300-100's first layer
(784 -> 300, batch 128) at several densities: (a) scatter the k values into a dense zero
weight and call F.linear; (b) a coalesced COO tensor and torch.sparse.mm. docs/ssvi.md
reports the result (dense materialisation is faster at every density tried).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ssvi_sparse_ops.py
"""
import time

import torch
import torch.nn.functional as F


def main(repeats: int = 50) -> None:
    torch.manual_seed(0)
    out_f, in_f, batch = 300, 784, 128
    print(f"{'density':>8s} {'dense (ms)':>11s} {'sparse (ms)':>12s}")
    for d in (0.05, 0.1, 0.2, 0.5):
        numel = out_f * in_f
        k = int(d * numel)
        idx = torch.randperm(numel)[:k].sort().values
        mu = torch.randn(k, requires_grad=True)
        x = torch.randn(batch, in_f)
        rows, cols = idx // in_f, idx % in_f

        def dense():
            w = torch.zeros(numel).index_put((idx,), mu).view(out_f, in_f)
            F.linear(x, w).sum().backward()

        def sparse():
            w = torch.sparse_coo_tensor(torch.stack([rows, cols]), mu, (out_f, in_f), is_coalesced=True)
            torch.sparse.mm(w, x.t()).sum().backward()

        times = []
        for fn in (dense, sparse):
            fn()
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn()
            times.append((time.perf_counter() - t0) / repeats * 1e3)
        print(f"{d:8.2f} {times[0]:11.2f} {times[1]:12.2f}")


if __name__ == "__main__":
    main()
