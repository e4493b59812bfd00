"""The target tools/ncu_hopper.sh profiles: one step's kernel built at SIZE^3 and run three times
in this process, for Nsight Compute to attach to. It measures nothing itself.

    bash tools/ncu_hopper.sh [STEP] [SIZE] [CONFIG_JSON]       # the usual way: ncu around this
    ncu --clock-control none --metrics ... python tools/ncu_probe.py STEP SIZE [CONFIG_JSON]

CONFIG_JSON (optional) replaces the step's default config, e.g. '{"block_m": 128, ...}'. Built for
sm_90 (an H100 or H200). Also used for the shared-memory bank-conflict counts in step 8's notes.
"""

import json
import sys

import numpy as np
import tvm

import schedules
from steps.measure.harness import random_operands

step, size = int(sys.argv[1]), int(sys.argv[2])
s = schedules.get_step(step)
cfg = s.Config.from_dict(json.loads(sys.argv[3])) if len(sys.argv) > 3 else s.default_config(size, size, size)
lib = schedules.build(step, size, size, size, arch="sm_90", config=cfg)
dev = tvm.cuda(0)
a, b = (tvm.runtime.tensor(x, dev) for x in random_operands(size, size, size, np.random.default_rng(0)))
c = tvm.runtime.tensor(np.zeros((size, size), np.float32), dev)
for _ in range(3):
    lib["main"](a, b, c)
dev.sync()
print(f"step {step} {size}: ran", cfg)
