"""Probe (issue 49): what holds step 29's kernel at 8192 x 32 x 2048 bf16 (0.72x cuBLAS, per kernel
0.85x alone with warm L2; flushed, 0.95x). ncu's target: STEP M N K [CONFIG_JSON] built in bf16
and run six times, or 'cublas M N K' (torch's bf16 matmul)."""
import json
import sys

import numpy as np

what, M, N, K = sys.argv[1], *map(int, sys.argv[2:5])
if what == "cublas":
    import torch
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    for _ in range(6):
        c = a @ b
    torch.cuda.synchronize(); print("cublas ran"); sys.exit()
import tvm
import schedules
s = schedules.get_step(int(what))
cfg = s.Config.from_dict(json.loads(sys.argv[5])) if len(sys.argv) > 5 else s.default_config(M, N, K, "bf16")
lib = schedules.build(s.number, M, N, K, arch="sm_90a", config=cfg, dtype="bf16")
dev = tvm.cuda(0)
x = np.random.default_rng(0).standard_normal((M, K)).astype(np.float16).view(np.uint16)
y = np.random.default_rng(1).standard_normal((K, N)).astype(np.float16).view(np.uint16)
a = tvm.runtime.empty((M, K), "bfloat16", dev).copyfrom(x)
b = tvm.runtime.empty((K, N), "bfloat16", dev).copyfrom(y)
c = tvm.runtime.empty((M, N), "bfloat16", dev)
for _ in range(6):
    lib["main"](a, b, c)
dev.sync()
print("ran", what, M, N, K, cfg)
