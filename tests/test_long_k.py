"""Long K (schedules/lowering/long_k.py) without a GPU: where the second accumulator is added, that every
other build is byte-identical to the CUDA before it existed, what the promoted CUDA holds, that
the pass computes exactly the two-level sum (run on the CPU through LLVM), the error model in a
float32 simulation, and ptxas's report of the promoted kernels.

The hashes in tests/data/long_k_cuda_sha256.json were taken at commit 9e24cce, before
schedules/lowering/long_k.py existed (step 14's re-taken when its fp32 fallback changed, 2026-11-25). A later, intended change to a step's CUDA at those shapes fails
``test_cuda_is_byte_identical_below_long_k``: re-take them with ``python -m tests.test_long_k``,
which hashes every build with the pass switched off (the CUDA as it would be without it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import schedules
from schedules.lowering import long_k
from steps.measure import nvcc

HASHES = json.loads((Path(__file__).parent / "data" / "long_k_cuda_sha256.json").read_text())["hashes"]
FP32_STEPS = [schedules.get_step(n) for n in (*range(1, 12), 14)]  # the fp32 steps
# The builds whose CUDA the pass changes, among the hashed shapes: the CUDA-core steps wherever
# K >= LONG_K; step 11 nowhere (its split leaves chunks of 1024 k at most); step 14 only where
# it adds more than CHUNK_ADDS slice sums (K = 2^16: 2048 slices of 32).
CHANGED = {"512x512x8192": set(range(1, 11)), "256x256x16384": set(range(1, 11)),
           "16x16x65536": set(range(1, 11)) | {14}}
LONG = (16, 16, 1 << 20)


def _shape(text: str) -> tuple[int, int, int]:
    return tuple(int(x) for x in text.split("x"))


@functools.lru_cache(maxsize=None)
def _source(number: int, shape: tuple) -> str:
    return schedules.cuda_source(schedules.build(number, *shape))


# --- where it applies -----------------------------------------------------------------------

@pytest.mark.parametrize("step", [1, 2, 3, 7, 10, 14])
def test_applies_from_long_k_on(step):
    s = schedules.get_step(step)
    for K, expected in ((4096, False), (long_k.LONG_K - 1, False), (long_k.LONG_K, True), (1 << 20, True)):
        assert long_k.applies(s.default_config(16, 16, K), K) is expected, (step, K)


def test_step_11_is_judged_by_its_chunk_not_by_k():
    s = schedules.get_step(11)
    for shape, expected in (((16, 16, 1 << 16), False), ((256, 256, 16384), False), (LONG, True)):
        cfg = s.default_config(*shape)
        assert long_k.applies(cfg, shape[2]) is expected, (shape, cfg.split_k, cfg.chunk_k(shape[2]))
        assert (cfg.chunk_k(shape[2]) >= long_k.LONG_K) is expected
    # The matrix-vector mode (K over a block's threads) is not covered.
    cfg = s.default_config(16, 1, 1 << 20)
    assert cfg.k_threads > 1 and not long_k.applies(cfg, 1 << 20)


def test_tf32_steps_are_never_promoted():
    for step in (12, 13):
        assert "_promoted" not in _source(step, (16, 16, 1 << 16))


# --- byte-identical below LONG_K, different where promoted ----------------------------------

@pytest.mark.parametrize("shape", list(HASHES))
def test_cuda_is_byte_identical_below_long_k(shape):
    changed = CHANGED.get(shape, set())
    for step, digest in HASHES[shape].items():
        now = hashlib.sha256(_source(int(step), _shape(shape)).encode()).hexdigest()[:16]
        if int(step) in changed:
            assert now != digest, f"step {step} at {shape}: expected the promoted CUDA, got the old"
            assert "_promoted" in _source(int(step), _shape(shape))
        else:
            assert now == digest, f"step {step} at {shape}: CUDA changed (long_k must not apply here)"


# --- what the promoted CUDA holds -----------------------------------------------------------

def _chunk_iterations(step, cfg) -> int:
    """k-loop iterations per chunk: CHUNK_ADDS adds, block_k per iteration of a sliced loop
    (steps 3-11), one for steps 1-2 (one k) and step 14 (one slice sum)."""
    return long_k.CHUNK_ADDS // (cfg.block_k if 3 <= step.number <= 11 else 1)


@pytest.mark.parametrize("step", FP32_STEPS, ids=lambda s: f"step{s.number}")
def test_long_k_cuda_keeps_a_second_accumulator(step):
    cfg = step.default_config(*LONG)
    src = _source(step.number, LONG)
    kernel = src.rsplit("main_kernel_1(", 1)[0]  # step 11: the partials kernel, not the reduction
    decl = re.findall(r"float (\w+)_promoted_ptr\[(\d+)\];", kernel)
    assert len(decl) == 1, decl
    acc, size = decl[0][0], int(decl[0][1])
    assert re.search(rf"float {acc}_ptr\[{size}\];", kernel), f"{acc}: the promoted buffer is not its size"
    # The loop over chunks, and the chunk's own loop of CHUNK_ADDS adds.
    per_chunk = _chunk_iterations(step, cfg)
    assert re.search(rf"for \(int k_in_chunk = 0; k_in_chunk < (min\()?{per_chunk}[;,]", kernel), per_chunk
    # Per chunk, every element is added into the second accumulator and zeroed, once.
    for e in (0, size - 1):
        assert kernel.count(f"{acc}_promoted_ptr[{e}] = ({acc}_promoted_ptr[{e}] + {acc}_ptr[{e}]);") == 1
        assert kernel.count(f"{acc}_ptr[{e}] = ({acc}_ptr[{e}] + {acc}_promoted_ptr[{e}]);") == 1
    if step.number == 11:
        assert "_promoted" not in src.rsplit("main_kernel_1(", 1)[1]


@pytest.mark.parametrize("step", [1, 2, 4])
def test_an_accumulator_in_c_itself_gets_one_slot_per_element(step):
    # 64 x 64 divides steps 1-4's tiles: no padding, so they add into C directly (nvcc keeps
    # it in registers), and each element of C a thread adds into is one slot.
    cfg = schedules.get_step(step).default_config(64, 64, 1 << 16)
    src = _source(step, (64, 64, 1 << 16))
    elements = getattr(cfg, "thread_m", 1) * getattr(cfg, "thread_n", 1)
    assert f"float C_promoted_ptr[{elements}];" in src
    assert src.count("C_promoted_ptr[0] = (C_promoted_ptr[0] + C_ptr[") == 1


# --- the pass computes the two-level sum: run on the CPU ------------------------------------

N_OUT, K_CPU = 8, 4096


@T.prim_func
def _local_sum(P: T.Buffer((K_CPU * N_OUT,), "float32"), C: T.Buffer((N_OUT,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    acc = T.alloc_local((N_OUT,))
    for j in range(N_OUT):
        acc[j] = T.float32(0)
    for k in range(K_CPU):
        for j in range(N_OUT):
            acc[j] = acc[j] + P[k * N_OUT + j]
    for j in range(N_OUT):
        C[j] = acc[j]


@T.prim_func
def _global_sum(P: T.Buffer((K_CPU * N_OUT,), "float32"), C: T.Buffer((N_OUT,), "float32"), one: T.int32):
    # Steps 1-4's shape: adds into C itself, at an index bound inside the loop.
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    C[0] = T.float32(0)
    C[one] = T.float32(0)
    for k in range(K_CPU):
        row: T.let[T.int32] = k * N_OUT
        second: T.let[T.int32] = one * 1
        C[0] = C[0] + P[row]
        C[second] = C[second] + P[row + 1]


def _run(func, p, *args):
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    c = tvm.runtime.tensor(np.zeros(N_OUT, np.float32))
    lib["main"](tvm.runtime.tensor(p.ravel()), c, *args)
    return c.numpy()


def _serial(p):  # float32 adds in k order, per output
    return np.add.accumulate(p, axis=0, dtype=np.float32)[-1]


def _promoted(p, chunk):
    return _serial(np.stack([_serial(p[c:c + chunk]) for c in range(0, len(p), chunk)]))


@pytest.mark.parametrize("func, outputs", [(_local_sum, N_OUT), (_global_sum, 2)], ids=["local", "in C"])
def test_the_pass_computes_the_promoted_sum_exactly(func, outputs):
    p = np.random.default_rng(1).uniform(-1, 1, (K_CPU, N_OUT)).astype(np.float32)
    args = (1,) if func is _global_sum else ()
    before, after = _run(func, p, *args), _run(func.with_body(long_k.add_promotion(func.body)), p, *args)
    assert np.array_equal(before[:outputs], _serial(p)[:outputs])  # the serial order, bit for bit
    assert np.array_equal(after[:outputs], _promoted(p, long_k.CHUNK_ADDS)[:outputs])  # the promoted one
    assert not np.array_equal(before[:outputs], after[:outputs])


def test_an_index_that_moves_with_k_is_refused():
    @T.prim_func
    def moving(P: T.Buffer((K_CPU,), "float32"), C: T.Buffer((K_CPU,), "float32")):
        for k in range(K_CPU):
            C[k // 2048] = C[k // 2048] + P[k]

    with pytest.raises(ValueError, match="depends on the loop"):
        long_k.add_promotion(moving.body)


def test_a_loop_of_one_chunk_is_left_alone():
    assert "k_chunk" in str(long_k.add_promotion(_local_sum.body, chunk_adds=K_CPU // 2))
    assert "k_chunk" not in str(long_k.add_promotion(_local_sum.body, chunk_adds=K_CPU))


# --- the error model: a float32 simulation of the summation order ---------------------------

@pytest.mark.parametrize("K, serial_over, promoted_under", [(1 << 16, 3e-6, 6e-7), (1 << 20, 1e-5, 1.2e-6)])
def test_promotion_brings_a_long_sum_to_sgemms_error(K, serial_over, promoted_under):
    # 16 outputs of uniform [-1, 1] data: the "K 2^16" and "long K" classes' shape. The H100
    # measured 4.9e-6 / 1.7e-5 for the serial sum (steps 1-10), SGEMM 4.9e-7 / 1.1e-6.
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (K, 1)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, 16)).astype(np.float32)
    p = a * b  # products rounded to fp32: the model without FMA's single rounding
    exact = p.astype(np.float64).sum(0)
    err = lambda c: np.linalg.norm(c - exact) / np.linalg.norm(exact)  # noqa: E731
    serial, promoted = err(_serial(p)), err(_promoted(p, long_k.CHUNK_ADDS))
    assert serial > serial_over and promoted < promoted_under, (serial, promoted)


# --- ptxas: the promoted kernels do not spill -----------------------------------------------

@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("step, shape", [(10, LONG), (11, LONG), (14, LONG), (10, (1024, 1024, 1 << 16))],
                         ids=lambda v: v if isinstance(v, int) else "x".join(map(str, v)))
def test_nvcc_promoted_kernels_do_not_spill(step, shape):
    report = nvcc.compile_report(_source(step, shape), "sm_90")
    assert report.ok, report.log[-2000:]
    assert report.spills == 0 and report.stack_bytes == 0, (report.registers, report.spills, report.stack_bytes)


def _retake(path: Path = Path(__file__).parent / "data" / "long_k_cuda_sha256.json") -> None:
    """Re-hash every build of the file's shapes with the pass switched off."""
    data = json.loads(path.read_text())
    applies, long_k.applies = long_k.applies, lambda cfg, K: False
    try:
        data["hashes"] = {shape: {step: hashlib.sha256(schedules.cuda_source(
            schedules.build(int(step), *_shape(shape))).encode()).hexdigest()[:16] for step in steps}
            for shape, steps in data["hashes"].items()}
    finally:
        long_k.applies = applies
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    _retake()
