"""CPU-only checks of the schedule ladder: every step builds to CUDA and shows its idea.

Nothing here needs a GPU. ``schedules.build`` lowers to CUDA C++ text; the assertions read
that text (and, where nvcc is installed, ptxas's resource report for it).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess

import pytest

import schedules
from schedules.config import MAX_SHARED_BYTES

STEPS = schedules.STEPS
# Steps 1-11 compute on CUDA cores: per-thread micro-tiles of C, FFMA accumulators, float4
# fragment loads. The tensor-core steps (12-14) replace those with warp fragments and mma.sync;
# the tests of those features are in tests/test_tensor_cores.py.
CUDA_CORE_STEPS = [s for s in STEPS if not s.tensor_cores and s.schedules_a_block]
# The steps that schedule the base matmul; the Hopper rungs' written kernels (steps 15-23, 25) are
# tests/test_hopper.py's, the matrix-vector kernel (24) tests/test_matvec.py's.
SCHEDULED = [s for s in STEPS if s.arch is None and s.number != 24]
SIZES = (256, 2048)
ARCHS = ("sm_90", "sm_80")
NVCC_SIZE = 2048
MAX_STATIC_SMEM = 48 * 1024
MAX_DYNAMIC_SMEM = 227 * 1024  # sm_90's per-block opt-in
MAX_REGISTERS = 255


def _step_id(step) -> str:
    return f"step{step.number}"


def _prior(step):
    return schedules.get_step(step.number - 1)


@functools.lru_cache(maxsize=None)
def _lib(number: int, n: int, arch: str = "sm_90", config=None):
    """A step built at n x n x n (default config unless given; built once per session)."""
    return schedules.build(number, n, n, n, arch=arch, config=config)


def _source(number: int, n: int, arch: str = "sm_90", config=None) -> str:
    """CUDA source of a step at n x n x n."""
    return schedules.cuda_source(_lib(number, n, arch, config))


def _host(number: int, n: int, arch: str = "sm_90", config=None) -> str:
    """The host module's source (LLVM IR): the kernel launch and its arguments."""
    return _lib(number, n, arch, config).mod.inspect_source()


def _config(step, n: int):
    return step.default_config(n, n, n)


# --- parsing the generated CUDA ---------------------------------------------------------

KERNEL_RE = re.compile(
    r'extern "C" __global__ void (?:__launch_bounds__\((?P<bounds>\d+)\) )?(?P<name>\w+)\('
)
# `__shared__ alignas(64) float A_shared_ptr[2048];` (TVM may type a buffer as float4).
SHARED_DECL_RE = re.compile(
    r"__shared__\s+(?:alignas\(\d+\)\s+)?(?P<type>float4?)\s+(?P<op>[AB])_shared(?:_ptr)?\s*\[(?P<n>\d+)\]\s*;"
)
# `alignas(64) float C_local_ptr[64];` -- a per-thread (register) array, not __shared__.
C_LOCAL_DECL_RE = re.compile(
    r"^\s*(?:alignas\(\d+\)\s+)?(?P<type>float4?)\s+C_local(?:_ptr)?\s*\[(?P<n>\d+)\]\s*;", re.M
)
LOCAL_DECL_RE = re.compile(r"^\s*(?:alignas\(\d+\)\s+)?float\d?\s+\w*_local\w*\s*\[\d+\]\s*;", re.M)
# `C_local_ptr[5] = (C_local_ptr[5] + (A_shared_local_ptr[(k_1_1 + 4)] * B_shared_local_ptr[...]));`
C_LOCAL_FMA_RE = re.compile(
    r"C_local(?:_ptr)?\[(\d+)\] = \(C_local(?:_ptr)?\[\1\] \+ \(\w+\[[^\]\[]+\] \* \w+\[[^\]\[]+\]\)\);"
)
SYNC_RE = re.compile(r"__syncthreads\(\);")
# `extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];` -- shared.dyn (steps 7+, > 48 KB).
DYN_SHARED_RE = re.compile(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?\w+\s+buf_dyn_shmem(?:_ptr)?\[\];")


def is_dynamic(src: str) -> bool:
    return DYN_SHARED_RE.search(src) is not None


def split_args(text: str) -> list[str]:
    """Split a C argument list at its top-level commas."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


# `ptx_cp_async_legacy_cg_16_4_4(A_shared_ptr, <dst offset>, A_ptr, <src offset>);`
CP_ASYNC_CALL_RE = re.compile(r"^\s*(?P<fn>\w*cp_async\w*)\((?P<args>.*)\);\s*$", re.M)


def cp_async_copies(src: str, op: str) -> list[tuple[str, str, str, str]]:
    """(function, shared destination, destination offset, source offset) of every cp.async
    of global `op` into shared memory."""
    copies = []
    for m in CP_ASYNC_CALL_RE.finditer(src):
        args = split_args(m["args"])
        if len(args) == 4 and re.fullmatch(rf"{op}(?:_ptr)?", args[2]):
            copies.append((m["fn"], args[0], args[1], args[3]))
    return copies


def device_function(src: str, name: str) -> str:
    """The body of a __device__ helper TVM emitted (e.g. the cp.async wrapper)."""
    m = re.search(rf"__device__\s+\w+\s+{name}\(", src)
    assert m, f"no definition of {name}"
    return braced_block(src, m.start())


def _floats(type_: str, n: str) -> int:
    return int(n) * (4 if type_ == "float4" else 1)


def shared_floats(src: str) -> dict[str, int]:
    """Declared __shared__ sizes in floats, per operand ('A', 'B')."""
    sizes: dict[str, int] = {}
    for m in SHARED_DECL_RE.finditer(src):
        assert m["op"] not in sizes, f"two shared declarations for {m['op']}"
        sizes[m["op"]] = _floats(m["type"], m["n"])
    return sizes


def shared_copies(src: str, op: str) -> list[tuple[str, str]]:
    """(lhs, rhs) of every statement storing global `op` into its shared buffer."""
    copies = []
    for line in src.splitlines():
        stmt = line.strip()
        if " = " not in stmt or not stmt.endswith(";"):
            continue
        lhs, rhs = stmt[:-1].split(" = ", 1)
        stores_shared = re.match(rf"(?:\*\(float\d\*\)\()?{op}_shared(?:_ptr)?\b", lhs)
        reads_global = re.search(rf"\b{op}(?:_ptr)?\s*[\[+]", rhs)
        if stores_shared and reads_global:
            copies.append((lhs, rhs))
    return copies


def _statements(src: str):
    for line in src.splitlines():
        stmt = line.strip()
        if " = " in stmt and stmt.endswith(";"):
            lhs, rhs = stmt[:-1].split(" = ", 1)
            yield lhs, rhs


def staging_loads(src: str, op: str) -> list[tuple[str, str]]:
    """(lhs, rhs) of every statement loading global `op` into its register array `op`_local."""
    return [
        (lhs, rhs)
        for lhs, rhs in _statements(src)
        if re.match(rf"(?:\*\(float\d\*\)\()?{op}_local(?:_ptr)?\b", lhs)
        and re.search(rf"\b{op}(?:_ptr)?\s*[\[+]", rhs)
    ]


def staging_stores(src: str, op: str) -> list[tuple[str, str]]:
    """(lhs, rhs) of every statement storing `op`_local (registers) into `op`_shared."""
    return [
        (lhs, rhs)
        for lhs, rhs in _statements(src)
        if re.match(rf"(?:\*\(float\d\*\)\()?{op}_shared(?:_ptr)?\b", lhs)
        and re.search(rf"\b{op}_local(?:_ptr)?\b", rhs)
    ]


# `alignas(64) float4 A_local_ptr[1];` -- step 6's per-thread staging array for A or B.
STAGING_DECL_RE = re.compile(
    r"^\s*(?:alignas\(\d+\)\s+)?(?P<type>float4?)\s+(?P<op>[AB])_local(?:_ptr)?\s*\[(?P<n>\d+)\]\s*;", re.M
)


def staging_floats(src: str) -> dict[str, int]:
    """Declared per-thread staging (`A_local`, `B_local`) sizes in floats, per operand."""
    sizes: dict[str, int] = {}
    for m in STAGING_DECL_RE.finditer(src):
        line = src[src.rfind("\n", 0, m.start()) + 1 : m.end()]
        assert "__shared__" not in line, line
        assert m["op"] not in sizes, f"two staging declarations for {m['op']}"
        sizes[m["op"]] = _floats(m["type"], m["n"])
    return sizes


def braced_block(src: str, start: int) -> str:
    """The text from `start` through the brace that closes the first `{` after it."""
    open_at = src.index("{", start)
    depth = 0
    for i in range(open_at, len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start : i + 1]
    raise AssertionError("unbalanced braces in the generated source")


def is_float4_copy(src: str, lhs: str, rhs: str, op: str) -> bool:
    """A 16-byte load from global `op` stored as one float4 into shared."""
    float4_load = re.match(rf"\*\(float4\*\)\({op}(?:_ptr)?\s*\+", rhs) is not None
    float4_store = lhs.startswith("*(float4*)(") or re.search(
        rf"__shared__\s+(?:alignas\(\d+\)\s+)?float4\s+{op}_shared", src
    ) is not None
    return float4_load and float4_store


# --- registry ---------------------------------------------------------------------------


def test_steps_are_ordered_and_unique():
    numbers = [s.number for s in STEPS]
    assert numbers == list(range(1, len(STEPS) + 1))
    assert numbers[:11] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert len(set(numbers)) == len(numbers)
    assert len({s.name for s in STEPS}) == len(STEPS)
    for s in STEPS:
        assert schedules.get_step(s.number) is s
        assert schedules.get_step(s) is s
        assert s.name and s.idea
        assert isinstance(s.Config, type)
        assert isinstance(s.pass_config, dict)


@pytest.mark.parametrize("step", STEPS, ids=_step_id)
def test_docstring_has_prediction_and_run_line(step):
    doc = step.module.__doc__ or ""
    assert doc == step.doc
    assert "Prediction" in doc
    assert "Run:" in doc
    run_targets = re.findall(r"python -m steps\.step(\d+)\b", doc)
    # The Run line names this step (more than once where it shows variants, e.g. --config), no other.
    assert run_targets and set(run_targets) == {str(step.number)}, f"Run line should name steps.step{step.number}"


@pytest.mark.parametrize("step", STEPS[1:], ids=_step_id)
@pytest.mark.parametrize("n", (512, 2048))
def test_each_step_changes_the_schedule(step, n):
    prior = _prior(step)
    # Step 11's idea applies where the output is small: at n^3 it is step 10's IR by design
    # (split_k 1, tests/test_split_k.py), so it is compared at a K-heavy shape instead.
    shape = (n // 8, n // 8, n * 8) if step.number == 11 else (n, n, n)
    script = step.schedule(*shape).mod.script()
    prior_script = prior.schedule(*shape).mod.script()
    assert script != prior_script, f"step {step.number} schedules the same IR as step {prior.number}"


# --- builds -----------------------------------------------------------------------------


@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("arch", ARCHS)
def test_builds_a_cuda_kernel(step, n, arch):
    cfg = _config(step, n)
    if cfg.shared_bytes > MAX_SHARED_BYTES[arch]:
        # Step 13's default from 2048 up is sized for sm_90 (204 KB, 4 stages): another arch is
        # refused in one line before anything is compiled (--config stages=3 fits sm_80).
        assert (step.number, arch) == (13, "sm_80") and n == 2048
        with pytest.raises(schedules.ConfigError, match=r"shared memory .* 163 KB per-block limit of sm_80"):
            schedules.build(step.number, n, n, n, arch=arch)
        assert dataclasses.replace(cfg, stages=3).shared_bytes <= MAX_SHARED_BYTES[arch]
        return
    src = _source(step.number, n, arch)
    assert 'extern "C" __global__' in src
    kernels = list(KERNEL_RE.finditer(src))
    assert kernels, "no kernel definition in the generated source"
    cfg = _config(step, n)
    # Declaration + definition of one kernel; with split-K (step 11) a second, the reduction
    # of the partials (its own 128 threads: tests/test_split_k.py), after the matmul's.
    if getattr(cfg, "split_k", 1) > 1:
        assert len({m["name"] for m in kernels}) == 2
        kernels = [m for m in kernels if m["name"] == kernels[0]["name"]]
    assert {m["name"] for m in kernels} == {kernels[0]["name"]}
    bounds = {m["bounds"] for m in kernels}
    assert bounds == {str(cfg.threads)}, f"launch bounds {bounds} != config threads {cfg.threads}"
    assert cfg.threads <= 1024


@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
@pytest.mark.parametrize("n", SIZES)
def test_shared_memory_staging(step, n):
    src = _source(step.number, n)
    cfg = _config(step, n)
    if step.number <= 2:
        assert "__shared__" not in src
        assert not SYNC_RE.search(src)
        return
    assert SYNC_RE.search(src)
    if step.tensor_cores:
        # `stages` slices of A (rows padded by pad_a) and of B (rows padded by pad_b), and after
        # the k loop the C tile (rows padded by pad_b), merged into one dynamic buffer: always
        # shared.dyn, its size the larger of the two, passed at launch.
        floats = lambda rows, cols: rows * cols * 4
        operands = cfg.stages * (floats(cfg.block_m, cfg.block_k + cfg.pad_a) + floats(cfg.block_k, cfg.block_n + cfg.pad_b))
        assert cfg.shared_bytes == max(operands, floats(cfg.block_m, cfg.block_n + cfg.pad_b))
        assert cfg.shared_scope == "shared.dyn" and is_dynamic(src)
        assert not re.search(r"^\s*__shared__", src, re.M)
        launch_constants = {int(v) for v in re.findall(r"store i64 (\d+),", _host(step.number, n))}
        assert cfg.shared_bytes in launch_constants, "dynamic shared bytes not passed at launch"
        return
    # What the config budgets for (and validates): one block_k slice of each operand through
    # step 6 (which double-buffers in registers); from step 7 `stages` slices, with A's rows
    # padded by pad_a floats from step 8.
    stages = getattr(cfg, "stages", 1)
    pad_a = getattr(cfg, "pad_a", 0)
    a_floats = stages * cfg.block_m * (cfg.block_k + pad_a)
    b_floats = stages * cfg.block_k * cfg.block_n
    assert (a_floats + b_floats) * 4 == cfg.shared_bytes
    if cfg.shared_bytes > MAX_STATIC_SMEM:
        # Over 48 KB: one dynamic buffer, sized at launch, and no static __shared__ arrays.
        assert step.number >= 7 and cfg.shared_scope == "shared.dyn"
        assert is_dynamic(src), "no extern __shared__ buffer for shared.dyn"
        assert shared_floats(src) == {} and not re.search(r"^\s*__shared__", src, re.M)
        launch_constants = {int(v) for v in re.findall(r"store i64 (\d+),", _host(step.number, n))}
        assert cfg.shared_bytes in launch_constants, "dynamic shared bytes not passed at launch"
        return
    assert cfg.shared_scope == "shared" and not is_dynamic(src)
    sizes = shared_floats(src)
    assert set(sizes) == {"A", "B"}, f"shared float arrays for A and B, got {sizes}"
    assert sizes == {"A": a_floats, "B": b_floats}, sizes


def _vector_store(src: str, lhs: str, op: str) -> bool:
    return lhs.startswith("*(float4*)(") or re.search(
        rf"__shared__\s+(?:alignas\(\d+\)\s+)?float4\s+{op}_shared", src
    ) is not None


@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
@pytest.mark.parametrize("n", SIZES)
def test_cooperative_float4_fetch(step, n):
    src = _source(step.number, n)
    if step.number <= 2:
        assert not shared_copies(src, "A") and not shared_copies(src, "B")
        return
    for op in ("A", "B"):
        if step.tensor_cores and not step.pass_config.get("tirx.use_async_copy"):
            # Step 12 (tensor cores before the pipeline): a float4 per thread per round straight
            # from global into the dynamic shared buffer, no cp.async and no register staging.
            assert not cp_async_copies(src, op) and not staging_loads(src, op)
            copies = [(lhs, rhs) for lhs, rhs in _statements(src)
                      if lhs.startswith("*(float4*)(((float*)buf_dyn_shmem_ptr)") and rhs.startswith(f"*(float4*)({op}_ptr")]
            assert copies, f"no float4 global->shared copy of {op}"
            for lhs, _ in copies:
                assert "threadIdx.x" in lhs and "threadIdx.y" in lhs, lhs
            continue
        if step.number >= 7:
            # global -> shared by cp.async, 16 bytes per thread per round, no registers.
            assert not shared_copies(src, op), shared_copies(src, op)
            assert not staging_loads(src, op), f"step {step.number} stages {op} in registers"
            copies = cp_async_copies(src, op)
            assert copies, f"no cp.async of {op}"
            dst = "buf_dyn_shmem_ptr" if is_dynamic(src) else f"{op}_shared_ptr"
            for fn, dst_buf, dst_off, src_off in copies:
                assert dst_buf == dst, (dst_buf, dst)
                assert '"n"(16)' in device_function(src, fn), fn
                assert "threadIdx.x" in dst_off and "threadIdx.y" in dst_off, dst_off
                assert "threadIdx.x" in src_off and "threadIdx.y" in src_off, src_off
            continue
        if step.number == 6:
            # global -> registers -> shared: no direct global -> shared copy is left.
            assert not shared_copies(src, op), shared_copies(src, op)
            loads, stores = staging_loads(src, op), staging_stores(src, op)
            assert loads, f"no global->register load of {op}"
            assert stores, f"no register->shared store of {op}"
            for lhs, rhs in loads:
                # Each thread loads its own float4s of the tile from global memory.
                assert re.match(rf"\*\(float4\*\)\({op}(?:_ptr)?\s*\+", rhs), (lhs, rhs)
                assert "threadIdx.x" in rhs and "threadIdx.y" in rhs, rhs
            for lhs, rhs in stores:
                assert _vector_store(src, lhs, op), (lhs, rhs)
                assert "threadIdx.x" in lhs and "threadIdx.y" in lhs, lhs
            continue
        assert not staging_loads(src, op), f"step {step.number} stages {op} in registers"
        copies = shared_copies(src, op)
        assert copies, f"no global->shared copy of {op}"
        if step.number == 3:
            # Every thread copies the whole tile itself, one float at a time.
            assert all("float4" not in lhs + rhs for lhs, rhs in copies), copies
            assert all("threadIdx" not in lhs for lhs, _ in copies), copies
        else:
            # The block shares the copy: each thread stores its own float4 slots.
            for lhs, rhs in copies:
                assert is_float4_copy(src, lhs, rhs, op), (lhs, rhs)
                assert "threadIdx.x" in lhs and "threadIdx.y" in lhs, lhs
    if step.number == 3:
        assert "float4" not in src


def _thread_stride(lhs: str, axis: str) -> int:
    """The coefficient of threadIdx.<axis> in a store index (1 when it appears bare)."""
    m = re.search(rf"\(\(int\)threadIdx\.{axis}\) \* (\d+)\)", lhs)
    if m:
        return int(m[1])
    assert f"((int)threadIdx.{axis})" in lhs, lhs
    return 1


@pytest.mark.parametrize("step", STEPS[3:6], ids=_step_id)
def test_fetch_gives_each_thread_a_contiguous_run(step):
    """Steps 4-6: the copy splits as [threadIdx.y, threadIdx.x, rounds, vector].

    At 256 the B tile (16 x 64) takes two rounds of 128 threads x float4, so each thread
    stores 8 consecutive floats: threadIdx.x strides by rounds x vector and threadIdx.y by
    threads_n x rounds x vector (a rounds-outermost split would stride threadIdx.x by 4).
    """
    n = 256
    src = _source(step.number, n)
    cfg = _config(step, n)
    declared = shared_floats(src)
    rounds_seen = set()
    for op, elems in (("A", cfg.block_m * cfg.block_k), ("B", cfg.block_k * cfg.block_n)):
        rounds = elems // (cfg.threads * cfg.vector)
        rounds_seen.add(rounds)
        run = rounds * cfg.vector  # floats per thread
        # Indices count float4s where TVM declared the shared array as float4.
        unit = 4 if re.search(rf"__shared__\s+(?:alignas\(\d+\)\s+)?float4\s+{op}_shared", src) else 1
        assert declared[op] == elems
        stores = staging_stores(src, op) if step.number == 6 else shared_copies(src, op)
        assert stores
        for lhs, _ in stores:
            assert _thread_stride(lhs, "x") * unit == run, lhs
            assert _thread_stride(lhs, "y") * unit == cfg.threads_n * run, lhs
    assert rounds_seen == {1, 2}, "the 256 default should give A one round and B two"


@pytest.mark.parametrize("step", [s for s in CUDA_CORE_STEPS if s.number >= 7], ids=_step_id)
def test_fetch_rounds_outermost_is_warp_contiguous(step):
    """Steps 7+: the copy splits as [rounds, threadIdx.y, threadIdx.x, vector], so one
    cp.async instruction of a warp covers 32 consecutive float4s of the (unpermuted) tile.

    Checked on the shared side where the layout is row-major: B unless step 8's permutation
    applies (thread_n > 4), A only in step 7 (step 8 permutes A's rows).
    """
    n = 256
    src = _source(step.number, n)
    cfg = _config(step, n)
    assert cfg.copy_rounds_outer and not schedules.get_step(6).default_config(n, n, n).copy_rounds_outer
    ty_extent, tx_extent = cfg.thread_axes
    ops = [("B", cfg.block_k * cfg.block_n)] if step.number == 7 or cfg.thread_n == 4 else []
    if step.number == 7:
        ops.append(("A", cfg.block_m * cfg.block_k))
    assert ops
    for op, elems in ops:
        rounds = elems // (cfg.threads * cfg.vector)
        copies = cp_async_copies(src, op)
        assert copies
        for _, _, dst_off, _ in copies:
            assert _thread_stride(dst_off, "x") == cfg.vector, dst_off
            assert _thread_stride(dst_off, "y") == tx_extent * cfg.vector, dst_off
            if rounds > 1:
                # The round loop strides by one whole block of threads x vector.
                assert re.search(rf"\(ax0_ax1_fused_0\w* \* {cfg.threads * cfg.vector}\)", dst_off), dst_off


@pytest.mark.parametrize("step", CUDA_CORE_STEPS, ids=_step_id)
@pytest.mark.parametrize("n", SIZES)
def test_register_accumulator(step, n):
    src = _source(step.number, n)
    cfg = _config(step, n)
    if getattr(cfg, "split_k", 1) > 1:
        # Split-K: the matmul kernel accumulates partial sums (C_rf_local) and writes them to
        # C_rf; the reduction kernel, defined last, has its own one-float C_local.
        src = src[: src.rfind('extern "C" __global__')].replace("C_rf", "C")
    if step.number <= 4:
        assert "C_local" not in src
        assert not LOCAL_DECL_RE.search(src)
        return
    decls = list(C_LOCAL_DECL_RE.finditer(src))
    assert len(decls) == 1, "one local C accumulator array"
    decl_line = src[src.rfind("\n", 0, decls[0].start()) + 1 : decls[0].end()]
    assert "__shared__" not in decl_line
    assert _floats(decls[0]["type"], decls[0]["n"]) == cfg.thread_m * cfg.thread_n
    assert re.search(rf"\bfloat C_local(?:_ptr)?\[{cfg.thread_m * cfg.thread_n}\];", src)
    assert C_LOCAL_FMA_RE.search(src), "the FMAs should accumulate into C_local"
    # Written back to global C once, from the local array.
    assert re.search(r"\bC(?:_ptr)?\s*[\[+].*= .*C_local", src)


FRAGMENT_DECL_RE = re.compile(
    r"^\s*(?:alignas\(\d+\)\s+)?(?P<type>float4?)\s+(?P<op>[AB])_shared(?:_dyn)?_local(?:_ptr)?\s*\[(?P<n>\d+)\]\s*;",
    re.M,
)


@pytest.mark.parametrize("step", CUDA_CORE_STEPS, ids=_step_id)
@pytest.mark.parametrize("n", SIZES)
def test_register_fragments_load_as_float4(step, n):
    """Step 5+: per run of `vector` k steps, thread_m x vector of A and vector x thread_n of B
    go from shared to registers as float4s (A's rows are contiguous along k, B's along n)."""
    src = _source(step.number, n)
    cfg = _config(step, n)
    if step.number <= 4:
        assert "_shared_local" not in src
        return
    sizes = {m["op"]: _floats(m["type"], m["n"]) for m in FRAGMENT_DECL_RE.finditer(src)}
    assert sizes == {"A": cfg.thread_m * cfg.vector, "B": cfg.vector * cfg.thread_n}, sizes
    dynamic = is_dynamic(src)
    assert dynamic == (cfg.shared_scope == "shared.dyn")
    for op in ("A", "B"):
        shared_is_float4 = re.search(rf"__shared__\s+(?:alignas\(\d+\)\s+)?float4\s+{op}_shared", src)
        loads = [
            (lhs, rhs) for lhs, rhs in _statements(src)
            if re.match(rf"(?:\*\(float\d\*\)\()?{op}_shared(?:_dyn)?_local(?:_ptr)?\w*\b", lhs)
        ]
        assert loads, f"no shared->register fragment load of {op}"
        for lhs, rhs in loads:
            assert lhs.startswith("*(float4*)("), lhs
            if dynamic:  # both operands live in the one dynamic buffer
                assert rhs.startswith("*(float4*)(((float*)buf_dyn_shmem_ptr) + "), rhs
                continue
            float4_read = rhs.startswith(f"*(float4*)({op}_shared") or (
                shared_is_float4 and re.fullmatch(rf"{op}_shared(?:_ptr)?\[[^\]]+\]", rhs)
            )
            assert float4_read, rhs


# --- step 6: double buffering through registers -----------------------------------------

STEP6_SIZES = (512, 2048)


@pytest.mark.parametrize("n", STEP6_SIZES)
def test_step6_stages_each_threads_share_in_registers(n):
    step6 = schedules.get_step(6)
    cfg6 = _config(step6, n)
    # Step 5 at the same tiles (its own default may differ): what step 6 adds to it.
    src5, src6 = _source(5, n, config=cfg6), _source(6, n)
    staged = staging_floats(src6)
    assert set(staged) == {"A", "B"}, f"register staging arrays for A and B, got {staged}"
    # Compacted per thread: each thread holds only its share of the tile, not the tile.
    assert staged["A"] == cfg6.block_m * cfg6.block_k // cfg6.threads
    assert staged["B"] == cfg6.block_k * cfg6.block_n // cfg6.threads
    assert all(v <= 32 for v in staged.values()), staged
    # Step 5 copies global -> shared directly.
    assert staging_floats(src5) == {}
    assert not re.search(r"\b[AB]_local(?:_ptr)?\b", src5)
    assert not staging_loads(src5, "A") and not staging_loads(src5, "B")
    # The shared buffers are not doubled: the same single slice as step 5.
    assert shared_floats(src6) == shared_floats(src5)
    assert shared_floats(src6) == {"A": cfg6.block_m * cfg6.block_k, "B": cfg6.block_k * cfg6.block_n}


def _k_outer(src: str) -> tuple[re.Match, str]:
    m = re.search(r"for \(int (k_0\w*) = 0; \1 < (\d+); \+\+\1\) \{", src)
    assert m, "no k_outer loop in the generated source"
    return m, braced_block(src, m.start())


def _events(body: str) -> list[str]:
    """The k_outer body as a sequence of load / sync / compute / store events, in order."""
    events = []
    inner = re.search(r"for \(int k_1\w* = 0;", body)
    assert inner, "no inner k loop in k_outer"
    inner_block = braced_block(body, inner.start())
    assert C_LOCAL_FMA_RE.search(inner_block), "the inner k loop should hold the FMAs"
    text = body[: inner.start()] + "\nCOMPUTE;\n" + body[inner.start() + len(inner_block) :]
    load_stmts = {(lhs, rhs): op for op in "AB" for lhs, rhs in staging_loads(text, op)}
    store_stmts = {(lhs, rhs): op for op in "AB" for lhs, rhs in staging_stores(text, op)}
    for line in text.splitlines():
        stmt = line.strip()
        if stmt == "COMPUTE;":
            events.append("compute")
        elif SYNC_RE.fullmatch(stmt):
            events.append("sync")
        elif " = " in stmt and stmt.endswith(";"):
            lhs, rhs = stmt[:-1].split(" = ", 1)
            if (lhs, rhs) in load_stmts:
                events.append("load " + load_stmts[lhs, rhs])
            elif (lhs, rhs) in store_stmts:
                events.append("store " + store_stmts[lhs, rhs])
    return events


@pytest.mark.parametrize("n", STEP6_SIZES)
def test_step6_prefetches_the_next_slice_during_compute(n):
    """k_outer runs: global->register loads of slice t+1, barrier, FMAs on slice t, stores."""
    cfg = _config(schedules.get_step(6), n)
    slices = n // cfg.block_k
    src6 = _source(6, n)
    loop, body = _k_outer(src6)
    # One slice is loaded before the loop (prologue) and computed after it (epilogue).
    assert int(loop[2]) == slices - 1
    events = _events(body)
    loads = [i for i, e in enumerate(events) if e.startswith("load")]
    stores = [i for i, e in enumerate(events) if e.startswith("store")]
    assert {events[i] for i in loads} == {"load A", "load B"}, events
    assert {events[i] for i in stores} == {"store A", "store B"}, events
    assert events.count("compute") == 1, events
    compute = events.index("compute")
    assert max(loads) < compute < min(stores), events
    # The shared slice is complete before the FMAs read it, and read before it is overwritten.
    assert "sync" in events[max(loads) : compute], events
    assert "sync" in events[compute : min(stores)], events
    # The loads inside the loop fetch slice k_0 + 1: offset by block_k columns of A ...
    var = loop[1]
    for op, offset in (("A", cfg.block_k), ("B", cfg.block_k * n)):
        for _, rhs in staging_loads(body, op):
            assert var in rhs, rhs
            assert re.search(rf"\+ {offset}\)+$", rhs), (op, offset, rhs)
    # ... and slice 0 is loaded and stored to shared before the loop starts.
    prologue = src6[: loop.start()]
    for op in ("A", "B"):
        assert staging_loads(prologue, op) and staging_stores(prologue, op)
        assert not any(var in rhs for _, rhs in staging_loads(prologue, op))
    # Epilogue: the last slice's FMAs after the loop, then C is written back.
    epilogue = src6[loop.start() + len(body) :]
    assert SYNC_RE.search(epilogue) and C_LOCAL_FMA_RE.search(epilogue)
    # Step 5 (same tiles) walks every slice in its k loop, copying straight to shared.
    loop5, body5 = _k_outer(_source(5, n, config=cfg))
    assert int(loop5[2]) == slices
    assert not any(e.startswith(("load", "store")) for e in _events(body5))


def _annotation(script: str, key: str) -> list[int] | None:
    m = re.search(rf'"{key}": \[([\d, ]*)\]', script)
    return None if m is None else [int(v) for v in m[1].split(",")]


@pytest.mark.parametrize("n", STEP6_SIZES)
def test_step6_software_pipeline_annotations(n):
    script6 = schedules.get_step(6).schedule(n, n, n).mod.script()
    script5 = schedules.get_step(5).schedule(n, n, n).mod.script()
    for key in ("software_pipeline_stage", "software_pipeline_order"):
        assert key not in script5
        assert script6.count(key) == 1, f"one annotated loop for {key}"
    # Body: [A->reg, reg->A_shared, B->reg, reg->B_shared, compute].
    stage = _annotation(script6, "software_pipeline_stage")
    order = _annotation(script6, "software_pipeline_order")
    assert stage == [0, 0, 0, 0, 1], "the copies run one slice ahead of the compute"
    assert sorted(order) == [0, 1, 2, 3, 4]
    loads, stores, compute = (order[0], order[2]), (order[1], order[3]), order[4]
    assert max(loads) < compute < min(stores), order
    # The annotated loop is k_outer, holding the local staging blocks.
    annotated = re.search(r"for (\w+) in T\.serial\((\d+), annotations=\{[^}]*software_pipeline_stage", script6)
    assert annotated and int(annotated[2]) == n // _config(schedules.get_step(6), n).block_k
    # A and B each get a `local` staging buffer between global and shared; step 5 has none.
    for op in ("A", "B"):
        assert re.search(rf'\b{op}_local = T\.\w*alloc_buffer\(.*scope="local"', script6), op
        assert re.search(rf"\b{op}_local\[[^]]*\] = {op}\[", script6), op
        assert re.search(rf"\b{op}_shared\[[^]]*\] = {op}_local\[", script6), op
        assert not re.search(rf"\b{op}_local\b", script5), op


# --- nvcc / ptxas -----------------------------------------------------------------------

NVCC = shutil.which("nvcc")


def _ptxas_report(output: str) -> dict[str, int]:
    stack = re.search(r"(\d+) bytes stack frame", output)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", output)
    regs = re.search(r"Used (\d+) registers", output)
    smem = re.search(r"(\d+) bytes smem", output)
    assert stack, f"no stack frame line in ptxas output:\n{output}"
    assert spills, f"no spill line in ptxas output:\n{output}"
    assert regs, f"no register count in ptxas output:\n{output}"
    return {
        "stack_frame": int(stack[1]),
        "spill_stores": int(spills[1]),
        "spill_loads": int(spills[2]),
        "registers": int(regs[1]),
        "smem": int(smem[1]) if smem else 0,
        "smem_reported": smem is not None,
    }


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH")
@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_nvcc_compiles_without_spills(step, tmp_path):
    src = _source(step.number, NVCC_SIZE, "sm_90")
    cu = tmp_path / f"step{step.number}.cu"
    cu.write_text(src)
    cubin = tmp_path / "out.cubin"
    proc = subprocess.run(
        [NVCC, "--cubin", "-arch=sm_90", "-Xptxas", "-v", str(cu), "-o", str(cubin)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert cubin.exists()
    report = _ptxas_report(output)
    assert report["spill_stores"] == 0, output
    assert report["spill_loads"] == 0, output
    # No local-memory arrays: step 6's staging copies and step 5's fragments stay in registers.
    assert report["stack_frame"] == 0, output
    assert report["registers"] <= MAX_REGISTERS
    assert report["smem"] <= MAX_STATIC_SMEM
    cfg = _config(step, NVCC_SIZE)
    if cfg.shared_scope == "shared.dyn":
        # ptxas counts only static shared memory; the dynamic buffer is sized at launch.
        assert 48 * 1024 < cfg.shared_bytes <= MAX_DYNAMIC_SMEM
        assert is_dynamic(src)
        assert report["smem"] == 0, output
    elif step.number >= 3:
        assert report["smem_reported"], output
        assert report["smem"] == cfg.shared_bytes
    else:
        assert report["smem"] == 0
