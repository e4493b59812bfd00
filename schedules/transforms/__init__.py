"""What the rungs are built from: schedule transforms and the pieces of the written kernels.

    cuda_core.py     the CUDA-core transforms of steps 1-11 (tiles, shared memory, pipelines, split-K)
    tensor_core.py   blockize + tensorize onto mma.sync, and its pipeline (steps 12-14)
    tensor_intrin.py the project's TF32 tensor intrinsics (TVM registers fp16 ones only)
    wgmma.py         the Hopper kernels written as sblocks of T.ptx calls (steps 15-22)
    padding.py       any M, N, K: pad to whole tiles, then fold the pads into the copies
    epilogue.py      D = act(alpha * A @ B + bias + beta * C_in) folded into a step's store

A transform imports only the configs (schedules/config.py), other transforms and the lowering
passes below it (schedules/lowering/), never a rung or the registry (tests/test_layout.py).
"""
