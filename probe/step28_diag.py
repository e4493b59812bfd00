"""Step 28 first GPU run: where it is wrong, if it is (rows, columns, halves), at 512 and odd shapes."""
import sys
import numpy as np
import tvm
import schedules

dev = tvm.cuda(0)
rng = np.random.default_rng(1)
for (M, N, K) in [(256, 256, 64), (512, 512, 512), (257, 129, 95), (1000, 1500, 700), (33, 65, 129), (4097, 33, 1001),
                  (300, 5000, 2001), (1, 4096, 4096), (2048, 2048, 2048), (3000, 2999, 517), (64, 64, 70000)]:
    lib = schedules.build(28, M, N, K, arch="sm_90a")
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32), dev)
    lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    dev.sync()
    out = c.numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(out - ref) / (np.abs(ref).max() + 1e-30)
    rel = np.linalg.norm(np.nan_to_num(out - ref, nan=1e30)) / np.linalg.norm(ref)
    sg = a @ b
    print(f"{M}x{N}x{K}: rel {rel:.3e} (sgemm {np.linalg.norm(sg - ref) / np.linalg.norm(ref):.3e}) nan {np.isnan(out).sum()}"
          f" bad rows {np.unique(np.nonzero(err > 1e-3)[0])[:20]} bad cols {np.unique(np.nonzero(err > 1e-3)[1])[:20]}",
          flush=True)
    if rel > 1e-3:
        print("  ratio out/ref sample:", (out[:4, :4] / ref[:4, :4]).round(4).tolist(), flush=True)
