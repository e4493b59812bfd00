"""Three cuBLAS GEMMs (SIZE^3, DTYPE) in this process, for Nsight Compute to attach to."""
import sys
import numpy as np
import cupy as cp
from steps.measure import dtypes, harness
size, dt = int(sys.argv[1]), sys.argv[2]
a, b = harness.random_operands(size, size, size, np.random.default_rng(1), dt)
g = harness.CublasGemm(cp.asarray(a), cp.asarray(b), cp.asarray(dtypes.nan_filled((size, size), dt)), dtype=dt)
cp.cuda.Device().synchronize()
for _ in range(3):
    g()
g.stream.synchronize(); g.close(); print("ran cuBLAS", size, dt)
