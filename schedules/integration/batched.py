"""Batched matmul: C[b] = A[b] @ B[b] for every b, one kernel, the batch as a grid axis.

Idea: a batched product is `batches` independent matmuls of the same M x N x K (attention's
q k^T and p v, one per head; B may be N x K, as k is). Each step's schedule already tiles one
M x N x K product over a grid of thread blocks; a batched one is the same grid repeated, so the
batch loop goes outermost and is bound to ``blockIdx.z``, and the step schedules the inner
(i, j, k) exactly as it schedules one product (its loops are found from the innermost three).
Every shared tile and fragment then sits inside one batch: the copies' regions have extent one
along the batch, so TVM compacts them to the tile alone, and the step's layouts (step 8's
permuted, padded shared tiles) map the leading index through unchanged.

What it leaves out, and why:
- **Split-K and the k_threads modes** (step 11's answer to an output with too few tiles for
  the SMs): they bind the K chunks to blockIdx.z too, and a batch multiplies the tiles anyway.
  Step 11 takes its shape rule's best tiled config with ``split_k`` 1 at batches x M rows (the
  same number of thread blocks side by side).
- **Staged padding** (``stage_pads``): a misaligned batch is read with the inlined,
  predicated copies.
- **The tensor-core steps** (12-13) and the written-out kernels (14-19): their fragment
  layouts and TMA descriptors are two-dimensional. ``config`` says so in one line.
- **A long serial K** (8192 and up, schedules/lowering/long_k.py): that needs a lowering pass of the
  ladder's own, which a model's single pipeline cannot run.

Where it enters: the dlight rule (schedules/integration/ladder_rule.py) recognises a batched product in a
model's function, B K x N or N x K, and schedules it through here; outside a model,
``ladder_rule.build(batched_matmul(...))`` compiles one.

Prediction: for batches x (M x N x K) each product's thread blocks run as they would alone, so a
batch of small products fills the SMs the way one product of batches x M rows would: throughput
near step 11's at (batches x M) x N x K where that shape is not itself split-K's. Not yet
measured on a GPU (no device time was left in the session that built it): the GPU test
``tests/test_gpu_ladder_rule.py`` checks its results against float64, and its speed is the next
measurement.

Pure IR: no GPU, no I/O.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.script import tirx as T

from .. import ConfigError, device_passes, shape_rule

MAX_BATCHES = 65535  # CUDA's limit on gridDim.z


def config(step, batches: int, M: int, N: int, K: int):
    """The config `step` runs a batch of M x N x K products with; ConfigError, one line, where
    the step cannot run one."""
    if not 1 <= batches <= MAX_BATCHES:
        raise ConfigError(f"a batch of {batches} products: the batch is blockIdx.z, at most {MAX_BATCHES}")
    if not step.schedules_a_block or step.tensor_cores:
        raise ConfigError(f"step {step.number} has no batched form: it is written for the CUDA-core steps "
                          "(1-11), whose thread blocks tile one product")
    cfg = step.default_config(M, N, K)
    if hasattr(cfg, "split_k"):
        tiled = [c for c in shape_rule.ranked(batches * M, N, K)
                 if c.k_threads == 1 and c.split_k == 1 and c.stage_pads == 0]
        if not tiled:
            raise ConfigError(f"no batched step-{step.number} config fits {M}x{N}x{K}")
        cfg = tiled[0]
    cfg.validate(M, N, K)
    if device_passes(step, cfg, K):
        raise ConfigError(f"a batched product over K = {K} needs the ladder's own lowering passes "
                          "(schedules/lowering/long_k.py), which a model's pipeline does not run")
    return cfg


def bind_batch(sch: s_tir.Schedule, block: s_tir.SBlockRV) -> None:
    """Bind the batch, the compute block's outermost loop, to blockIdx.z: before the step
    schedules the inner three, while the loop holds the product alone."""
    sch.bind(sch.get_loops(block)[0], "blockIdx.z")


def batched_matmul(batches: int, M: int, N: int, K: int, transposed_b: bool = False):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] (B[b, j, k] with `transposed_b`), in float32."""
    b_shape = (batches, N, K) if transposed_b else (batches, K, N)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((batches, M, K), "float32"), B: T.Buffer(b_shape, "float32"),
             C: T.Buffer((batches, M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for b, i, j, k in T.grid(batches, M, N, K):
            with T.sblock("matmul"):
                vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
                with T.init():
                    C[vb, vi, vj] = T.float32(0)
                if transposed_b:
                    C[vb, vi, vj] = C[vb, vi, vj] + A[vb, vi, vk] * B[vb, vj, vk]
                else:
                    C[vb, vi, vj] = C[vb, vi, vj] + A[vb, vi, vk] * B[vb, vk, vj]

    return main

