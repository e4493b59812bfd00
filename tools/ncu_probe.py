"""Run one step's kernel a few times in this process, for a profiler to attach to.

    ncu --clock-control none --metrics ... python tools/ncu_probe.py STEP SIZE [CONFIG_JSON]

CONFIG_JSON (optional) replaces the step's default config, e.g. '{"block_m": 128, ...}'.

Used for the shared-memory bank-conflict counts reported in step 8's notes.
"""

import json
import sys

import numpy as np
import tvm

import schedules

step, size = int(sys.argv[1]), int(sys.argv[2])
s = schedules.get_step(step)
cfg = s.Config.from_dict(json.loads(sys.argv[3])) if len(sys.argv) > 3 else s.default_config(size, size, size)
lib = schedules.build(step, size, size, size, arch="sm_90", config=cfg)
dev = tvm.cuda(0)
rng = np.random.default_rng(0)
a = tvm.runtime.tensor(rng.uniform(-1, 1, (size, size)).astype(np.float32), dev)
b = tvm.runtime.tensor(rng.uniform(-1, 1, (size, size)).astype(np.float32), dev)
c = tvm.runtime.tensor(np.zeros((size, size), np.float32), dev)
for _ in range(3):
    lib["main"](a, b, c)
dev.sync()
print(f"step {step} {size}: ran", cfg)
