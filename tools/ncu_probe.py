"""The target tools/ncu_hopper.sh profiles: one step's kernel built at SIZE^3 and run three times
in this process, for Nsight Compute to attach to. It measures nothing itself.

    bash tools/ncu_hopper.sh [STEP] [SIZE] [CONFIG_JSON]       # the usual way: ncu around this
    ncu --clock-control none --metrics ... python tools/ncu_probe.py STEP SIZE [CONFIG_JSON]

CONFIG_JSON (optional) replaces the step's default config, e.g. '{"block_m": 128, ...}'. Built for
sm_90 (an H100 or H200). Also used for the shared-memory bank-conflict counts in step 8's notes.
DTYPE in the environment (fp16, bf16) builds the step's 16-bit form, on 16-bit inputs.
"""

import os

import json
import sys

import numpy as np
import tvm

import schedules
from steps.measure.harness import random_operands

step, size = int(sys.argv[1]), int(sys.argv[2])
dtype = os.environ.get("DTYPE", "fp32")
s = schedules.get_step(step)
cfg = s.Config.from_dict(json.loads(sys.argv[3])) if len(sys.argv) > 3 else s.default_config(size, size, size, dtype)
lib = schedules.build(step, size, size, size, arch="sm_90", config=cfg, dtype=dtype)
dev = tvm.cuda(0)
# 16-bit operands: any bits serve a profile (the values are not checked); fp16 keeps them finite.
a, b = (x if dtype == "fp32" else x.astype(np.float16) for x in random_operands(size, size, size, np.random.default_rng(0)))
if dtype == "bf16":
    a, b = a.view(np.uint16), b.view(np.uint16)  # fp16 bit patterns read as bf16: finite values
a, b = (tvm.runtime.tensor(x, dev) if dtype != "bf16" else tvm.runtime.empty(x.shape, "bfloat16", dev).copyfrom(x)
        for x in (a, b))
c = tvm.runtime.tensor(np.zeros((size, size), np.float32 if dtype == "fp32" else np.float16), dev) if dtype != "bf16" \
    else tvm.runtime.empty((size, size), "bfloat16", dev)
for _ in range(3):
    lib["main"](a, b, c)
dev.sync()
print(f"step {step} {size}: ran", cfg)
