"""Step 11's staged padding (``stage_pads`` 1, schedules/transforms/padding.py ``stage_padding``).

Where N or K is not a multiple of the vector, the misaligned operands are copied by kernels of
their own into padded, aligned global buffers, and the matmul keeps its full vector width.
CPU: the CUDA has the copy kernels and a main loop of 16-byte, unpredicated cp.async (the very
copies of the aligned padded problem), C's stores are as wide as N allows, ptxas reports no
spills or stack; aligned shapes get the IR of stage_pads 0; the staged TensorIR computes the
product (serial on the CPU); the field validates and loads from tuned tables; the shape rule
stages big misaligned shapes and nothing else. GPU (marked): correct with C poisoned with NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import numpy as np
import pytest
import tvm

import schedules
from schedules.transforms import padding
from schedules import shape_rule, step10_tuned, step11_split_k
from schedules.config import SplitKConfig
from steps.commands import sweep
from steps.measure import harness, nvcc

from .checks import config_error
from .test_shapes import serial_cpu_build
from .test_split_k import BASE, kernels

STEP11 = schedules.get_step(11)
STAGED = dataclasses.replace(BASE, stage_pads=1)


def staged(**changes) -> SplitKConfig:
    return dataclasses.replace(STAGED, **changes)


@functools.lru_cache(maxsize=None)
def _cuda(shape, cfg) -> str:
    return schedules.cuda_source(schedules.build(11, *shape, config=cfg))


def _bodies(shape, cfg) -> list[str]:
    return list(kernels(_cuda(shape, cfg)).values())


def cp_async(body: str) -> list[tuple[str, int, str]]:
    """Each cp.async call of a kernel body: (helper name, bytes, source pointer)."""
    calls = re.findall(r"(ptx_cp_async\w*?_c[ag]_(\d+)_\d+_\d+)\(\w+, [^;]*?, (\w+_ptr), ", body)
    return [(name, int(size), src) for name, size, src in calls]


def c_stores(body: str) -> dict[str, int]:
    """Stores into C of a kernel body, by width: float4, float2, scalar."""
    return {"float4": len(re.findall(r"\*\(float4\*\)\(C_ptr \+", body)),
            "float2": len(re.findall(r"\*\(float2\*\)\(C_ptr \+", body)),
            "scalar": len(re.findall(r"(?<![\w*(])C_ptr\[[^;]*\] = ", body))}


# (shape, config, operands staged): both misaligned (split 1 and split-K, a K smaller than a
# few slices), A only (K odd, N aligned), B only (N = 2 mod 4: float2 stores of C).
BUILD_CASES = [
    ((2047, 2047, 2047), STAGED, ("A", "B")),
    ((1531, 769, 3067), staged(split_k=2, stages=3), ("A", "B")),
    ((4093, 4099, 127), staged(block_k=16, stages=3), ("A", "B")),
    ((256, 256, 131), STAGED, ("A",)),
    ((300, 130, 256), STAGED, ("B",)),
]
CASE_IDS = ["x".join(map(str, case[0])) for case in BUILD_CASES]


# --- which operands are staged ---------------------------------------------------------------


@pytest.mark.parametrize("shape, cfg, operands", BUILD_CASES, ids=CASE_IDS)
def test_staged_operands_are_the_misaligned_ones(shape, cfg, operands):
    assert padding.staged_operands(cfg, *shape) == operands
    assert padding.staged_operands(dataclasses.replace(cfg, stage_pads=0), *shape) == ()
    # No narrowing where the config stages: the matmul reads aligned rows only.
    assert padding.effective_config(cfg, *shape) is cfg
    assert padding.effective_config(dataclasses.replace(cfg, stage_pads=0), *shape).vector < 4


def test_describe_says_what_is_staged():
    assert padding.describe(STAGED, 2047, 2047, 2047) == "padded to 2048x2048x2048, A, B staged to aligned copies"
    assert padding.describe(STAGED, 300, 130, 256) == "padded to 320x192x256, B staged to an aligned copy"
    assert padding.describe(BASE, 2047, 2047, 2047) == "padded to 2048x2048x2048, vector 1"
    assert padding.describe(STAGED, 1000, 1500, 700) == "padded to 1024x1536x704"  # aligned: nothing staged
    assert "A and B staged" in shape_rule.describe(STAGED, 2047, 2047, 2047)
    assert "staged" not in shape_rule.describe(BASE, 2047, 2047, 2047)


# --- the CUDA: copy kernels, then the aligned problem's kernel ---------------------------------


@pytest.mark.parametrize("shape, cfg, operands", BUILD_CASES, ids=CASE_IDS)
def test_staged_cuda_copies_then_full_width_cp_async(shape, cfg, operands):
    bodies = _bodies(shape, cfg)
    src = _cuda(shape, cfg)
    # One copy kernel per staged operand, then the matmul, then split-K's reduction if any.
    assert len(bodies) == len(operands) + 1 + (cfg.split_k > 1), [b[:80] for b in bodies]
    heads = re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) \w+\(([^)]*)\) \{', src)
    for name, head, body in zip(operands, heads, bodies):
        assert re.findall(r"\w+_ptr", head) == [f"{name}_ptr", f"{name}_pad_ptr"], head
        # One scalar element per thread, read under the bounds check, written unconditionally.
        assert len(re.findall(rf"\b{name}_ptr\[", body)) == 1 and len(re.findall(rf"\b{name}_pad_ptr\[", body)) == 1
        assert "float4" not in body and "float2" not in body
    main = bodies[len(operands)]
    copies = cp_async(main)
    assert copies and all(size == 16 for _, size, _ in copies), copies
    for name in operands:
        # The matmul reads the aligned copy, never the operand itself, and without a predicate.
        assert not re.search(rf"\b{name}_ptr\b", main)
        reads = [helper for helper, _, source in copies if source == f"{name}_pad_ptr"]
        assert reads and not any("pred" in helper for helper in reads), reads
    # Its fragments load from shared memory as float4, as in the aligned kernel.
    assert re.search(r"= \*\(float4\*\)\([AB]_pad_shared_ptr", main)


@pytest.mark.parametrize("shape, cfg, operands", BUILD_CASES[:3], ids=CASE_IDS[:3])
def test_without_staging_the_same_shapes_copy_4_bytes(shape, cfg, operands):
    """The other side of the test above: the narrowing that staging removes is really there."""
    main = _bodies(shape, dataclasses.replace(cfg, stage_pads=0))[0]
    assert len(_bodies(shape, dataclasses.replace(cfg, stage_pads=0))) == 1 + (cfg.split_k > 1)
    assert {size for _, size, _ in cp_async(main)} == {4}


def _copies_and_fragment_loads(body: str) -> list[str]:
    """cp.async and float4 lines of a kernel, with the padded buffers' names made plain and
    TVM's numbering of common subexpressions dropped (it differs between builds)."""
    body = re.sub(r"cse_v\d+", "cse", body.replace("_pad", ""))
    return [line.strip() for line in body.splitlines()
            if ("cp_async" in line or "float4" in line) and "C_ptr" not in line]


def test_staged_main_kernel_copies_are_the_aligned_problems():
    """2047^3 staged: every cp.async and fragment load of its matmul is, character for
    character, that of 2048^3 with the same config (the padded problem); only C's stores differ."""
    odd = _bodies((2047, 2047, 2047), STAGED)[2]
    even = _bodies((2048, 2048, 2048), STAGED)[0]
    lines = _copies_and_fragment_loads(even)
    assert _copies_and_fragment_loads(odd) == lines
    # Not vacuous: the A and B cp.async of the prologue and the loop, and the fragment loads.
    assert sum("ptx_cp_async_legacy_cg_16" in line for line in lines) == 4
    assert sum("float4" in line for line in lines) >= 32
    assert c_stores(even)["float4"] and not c_stores(odd)["float4"]


@pytest.mark.parametrize("shape, cfg, operands", BUILD_CASES, ids=CASE_IDS)
def test_c_stores_are_as_wide_as_n_allows(shape, cfg, operands):
    """A float4 store into a row of odd length is misaligned (the kernel would fault): C's
    write-back, vectorized by the full vector, is cut to float2 where 2 | N, to scalars where N
    is odd, and left at float4 where 4 | N."""
    bodies = _bodies(shape, cfg)
    N = shape[1]
    stores = c_stores(bodies[-1])
    if cfg.split_k > 1:
        # The reduction stores C one element per thread; the partials go to an aligned buffer.
        assert stores == {"float4": 0, "float2": 0, "scalar": 1}, stores
        assert re.search(r"\*\(float4\*\)\(C_pad_rf_ptr \+", bodies[-2])
    elif N % 4 == 0:
        assert stores["float4"] and not stores["float2"] and not stores["scalar"], stores
    elif N % 2 == 0:
        assert stores["float2"] and not stores["float4"] and not stores["scalar"], stores
    else:
        assert stores["scalar"] and not stores["float4"] and not stores["float2"], stores


def test_narrow_vectors_cuts_only_what_is_too_wide():
    """Unstaged at N = 66, K = 130 the vector is narrowed to 2 already: narrowing C's
    write-back for N = 66 leaves it alone; for an odd row length it becomes scalar."""
    sch = STEP11.schedule(33, 66, 130, BASE)
    block = sch.get_sblock("C_pad_local")  # C's write-back, C_pad inlined into it

    def vectorized():
        return [int(sch.get(loop).extent) for loop in sch.get_loops(block)
                if sch.get(loop).kind == tvm.tirx.ForKind.VECTORIZED]

    before = sch.mod.script()
    assert vectorized() == [2]
    padding.narrow_vectors(sch, block, 66)
    assert sch.mod.script() == before
    padding.narrow_vectors(sch, block, 65)
    assert vectorized() == [] and sch.mod.script() != before


# --- aligned shapes: stage_pads changes nothing ------------------------------------------------


@pytest.mark.parametrize("shape, cfg", [
    ((1024, 1024, 1024), BASE),
    ((1000, 1500, 700), BASE),              # padded, but N and K are multiples of 4
    ((200, 136, 1000), dataclasses.replace(BASE, split_k=4)),
    # The rule's best tiled config (its pick at M = 1 is the vector-matrix mode, which stages nothing).
    ((1, 2048, 2048), shape_rule.tiled_config(1, 2048, 2048)),
], ids=["1024^3", "1000x1500x700", "200x136x1000-split4", "1x2048x2048-rule"])
def test_stage_pads_is_a_no_op_on_aligned_shapes(shape, cfg):
    """Staging an aligned operand would only add a copy (its predicated float4 copies are full
    width already), so stage_pads 1 stages nothing there: the same IR as stage_pads 0."""
    off = STEP11.schedule(*shape, dataclasses.replace(cfg, stage_pads=0)).mod.script()
    on = STEP11.schedule(*shape, dataclasses.replace(cfg, stage_pads=1)).mod.script()
    assert on == off
    assert padding.staged_operands(dataclasses.replace(cfg, stage_pads=1), *shape) == ()


def test_stage_pads_changes_the_ir_where_misaligned():
    off = STEP11.schedule(257, 129, 131, BASE).mod.script()
    on = STEP11.schedule(257, 129, 131, STAGED).mod.script()
    assert on != off
    # The pad blocks are kernels of their own, not inlined into the shared-memory copies.
    assert 'T.sblock("A_pad")' in on and 'T.sblock("B_pad")' in on
    assert 'T.sblock("A_pad")' not in off and 'T.sblock("B_pad")' not in off


# --- ptxas ------------------------------------------------------------------------------------


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("shape, cfg, operands", BUILD_CASES[:3], ids=CASE_IDS[:3])
def test_staged_builds_have_no_spills_or_stack(shape, cfg, operands):
    report = nvcc.compile_report(_cuda(shape, cfg))
    assert report.ok, report.log[-500:]
    assert report.spills == 0 and report.stack_bytes == 0, report.log[-800:]
    # A resource line per kernel: the copy kernels, the matmul, the reduction.
    assert len(re.findall(r"Used \d+ registers", report.log)) == len(operands) + 1 + (cfg.split_k > 1)


# --- the staged TensorIR computes the product (CPU, threads as serial loops) -------------------

SERIAL_CASES = [
    ((33, 65, 129), STAGED),                               # A and B staged, scalar C stores
    ((33, 66, 130), STAGED),                               # float2 C stores
    ((70, 65, 300), staged(split_k=3)),                    # split-K: C folds into the reduction
    ((40, 64, 131), STAGED),                               # A only
    ((40, 66, 128), STAGED),                               # B only
    ((9, 1, 20), dataclasses.replace(shape_rule.tiled_config(9, 1, 20), stage_pads=1)),
    # The rule's best tiled, staged config at 2048 x 1 x 2048 (B only), at fewer rows. (The rule's
    # own pick there is now the matrix-vector mode, k_threads > 1, which stages nothing.)
    ((130, 1, 2048), next(c for c in shape_rule.ranked(2048, 1, 2048) if c.k_threads == 1 and c.stage_pads)),
]


def _case_id(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else ""


@pytest.mark.parametrize("shape, cfg", SERIAL_CASES, ids=_case_id)
def test_staged_ir_computes_the_product(shape, cfg):
    M, N, K = shape
    assert padding.staged_operands(cfg, M, N, K)
    lib = serial_cpu_build(STEP11, M, N, K, cfg)
    rng = np.random.default_rng([20261124, M, N, K])
    a, b = harness.random_operands(M, N, K, rng)
    c = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    err = harness.relative_error(c.numpy(), a.astype(np.float64) @ b.astype(np.float64))
    assert err <= harness.TOLERANCE, f"relative error {err}"


# --- the field --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [2, -1, True, "1", 0.5])
def test_stage_pads_must_be_0_or_1(value):
    config_error(lambda: dataclasses.replace(BASE, stage_pads=value).validate(2047, 2047, 2047), "stage_pads")


def test_stage_pads_validates_and_defaults_to_0():
    for value in (0, 1):
        dataclasses.replace(BASE, stage_pads=value).validate(2047, 2047, 2047)
    assert SplitKConfig().stage_pads == 0
    without = {k: v for k, v in STAGED.as_dict().items() if k != "stage_pads"}
    assert SplitKConfig.from_dict(without).stage_pads == 0
    assert SplitKConfig.from_dict(STAGED.as_dict()) == STAGED
    # Step 10's config has no such field: staging is step 11's.
    assert "stage_pads" not in step10_tuned.TunedConfig().as_dict()


def test_staged_copy_must_stay_int32_indexable():
    # A is 65535 x 32767 (below 2^31 elements); its padded copy 65536 x 32768 = 2^31 is not.
    config_error(lambda: STAGED.validate(65535, 1, 32767), "stage_pads", "A", "2^31")
    BASE.validate(65535, 1, 32767)  # inlined padding allocates no copy


def test_tuned_tables_load_with_and_without_the_field(tmp_path):
    assert step11_split_k.tuned_configs()  # the committed table, written before the field
    path = tmp_path / "step11.json"
    entries = [{"M": 2047, "N": 2047, "K": 2047,
                "config": {k: v for k, v in BASE.as_dict().items() if k != "stage_pads"}},
               {"M": 997, "N": 1009, "K": 1013, "config": STAGED.as_dict()}]
    path.write_text(json.dumps({"configs": entries}))
    tuned = step11_split_k.tuned_configs(path)
    assert tuned[(2047, 2047, 2047)].stage_pads == 0 and tuned[(997, 1009, 1013)] == STAGED
    entries[1]["config"]["stage_pads"] = 2
    path.write_text(json.dumps({"configs": entries}))
    config_error(lambda: step11_split_k.tuned_configs(path), "stage_pads")


# --- the shape rule ---------------------------------------------------------------------------

BIG_ODD = [(2047, 2047, 2047), (997, 1009, 1013), (1531, 769, 3067), (4093, 4099, 127), (2053, 3001, 1021)]


@pytest.mark.parametrize("shape", BIG_ODD, ids=_case_id)
def test_rule_stages_big_misaligned_shapes(shape):
    cfg = shape_rule.rule_config(*shape)
    assert cfg.stage_pads == 1 and padding.staged_operands(cfg, *shape) == ("A", "B"), cfg


def test_rule_does_not_stage_tiny_or_aligned_shapes():
    # 33 x 65 x 129: two copy launches cost more than the narrowed kernel loses.
    tiny = shape_rule.rule_config(33, 65, 129)
    assert tiny.stage_pads == 0
    assert shape_rule.predicted_seconds(dataclasses.replace(tiny, stage_pads=1), 33, 65, 129) > \
        shape_rule.predicted_seconds(tiny, 33, 65, 129)
    for shape in [(1000, 1500, 700), (2048, 2048, 2048), (256, 256, 16384), (1, 2048, 2048), (4096, 4096, 64)]:
        assert not shape_rule.misaligned(*shape)
        assert all(c.stage_pads == 0 for c in shape_rule.candidates(*shape)), shape


def test_rule_model_of_staging():
    """stage_pads 0 at 2047^3: the aligned kernel's time / NARROW_VECTOR_RATE (0.68, measured
    2047^3 against 2048^3); 1: the aligned kernel's time plus the copies (a launch each and
    the operand read and its padded copy written at DRAM speed)."""
    aligned = shape_rule.compute_seconds(BASE, 2048, 2048, 2048)
    assert shape_rule.compute_seconds(BASE, 2047, 2047, 2047) == pytest.approx(aligned / 0.68)
    copies = 2 * (shape_rule.STAGE_LAUNCH_S + (2047 * 2047 + 2048 * 2048) * 4 / shape_rule.DRAM_BYTES_S)
    assert shape_rule.staging_seconds(STAGED, 2047, 2047, 2047) == pytest.approx(copies)
    assert shape_rule.compute_seconds(STAGED, 2047, 2047, 2047) == pytest.approx(aligned + copies)
    assert shape_rule.staging_seconds(BASE, 2047, 2047, 2047) == 0
    assert shape_rule.staging_seconds(STAGED, 2048, 2048, 2048) == 0
    # Only the staged operand is copied: A at 2048 x 2048 x 1 (K = 1), 2048 x 16 padded.
    a_only = shape_rule.staging_seconds(staged(block_k=16), 2048, 2048, 1)
    assert a_only == pytest.approx(shape_rule.STAGE_LAUNCH_S + (2048 + 2048 * 16) * 4 / shape_rule.DRAM_BYTES_S)


def test_rule_with_staging_is_deterministic():
    shapes = BIG_ODD + [(33, 65, 129), (2048, 1, 2048), (127, 131, 1009)]
    first = [shape_rule.rule_config(*s) for s in shapes]
    assert [shape_rule.rule_config(*s) for s in reversed(shapes)] == first[::-1]
    assert shape_rule.neighbourhood(2047, 2047, 2047) == shape_rule.neighbourhood(2047, 2047, 2047)


def test_sweep_measures_both_sides_on_misaligned_shapes():
    cfgs = step11_split_k.sweep_candidates(2047, 2047, 2047, "sm_90", 132, sweep.NEIGHBOURHOOD)
    step10 = SplitKConfig(**step10_tuned.default_config(2047, 2047, 2047).as_dict(), split_k=1)
    # Step 10's own config, inlined and staged: the comparison that isolates staging.
    assert cfgs[:2] == [step10, dataclasses.replace(step10, stage_pads=1)]
    pick = shape_rule.rule_config(2047, 2047, 2047)
    assert pick in cfgs and dataclasses.replace(pick, stage_pads=1 - pick.stage_pads) in cfgs
    assert len(cfgs) <= sweep.NEIGHBOURHOOD and len(set(cfgs)) == len(cfgs)
    # The committed entry (written before the field: stage_pads 0) is re-measured both ways.
    committed = step11_split_k.tuned_configs()[(1531, 769, 3067)]
    cfgs = step11_split_k.sweep_candidates(1531, 769, 3067, "sm_90", 132, sweep.NEIGHBOURHOOD)
    assert committed in cfgs and dataclasses.replace(committed, stage_pads=1 - committed.stage_pads) in cfgs
    # 33 x 65 x 129: the rule does not stage, but the sweep still measures the staged pick.
    small = step11_split_k.sweep_candidates(33, 65, 129, "sm_90", 132, sweep.NEIGHBOURHOOD)
    assert dataclasses.replace(shape_rule.rule_config(33, 65, 129), stage_pads=1) in small
    # Aligned shapes: nothing staged to measure (it would be the same kernel twice).
    aligned = step11_split_k.sweep_candidates(2048, 2048, 2048, "sm_90", 132, sweep.NEIGHBOURHOOD)
    assert all(c.stage_pads == 0 for c in aligned)


# --- GPU --------------------------------------------------------------------------------------

GPU_CASES = [
    ((257, 129, 131), STAGED),                                       # 320 x 192 x 160 padded
    ((513, 257, 1025), "tuned"),                                     # the tuned split 3, staged
    ((2047, 2047, 2047), STAGED),
    ((4093, 4099, 127), staged(block_k=16, stages=3)),
    ((256, 256, 131), STAGED),                                       # A only
    ((300, 130, 256), STAGED),                                       # B only, float2 stores of C
    ((2048, 1, 2048), "rule"),                                       # B only, 8-wide tile, split-K
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape, cfg", GPU_CASES, ids=_case_id)
def test_staged_padding_is_correct_on_the_gpu(shape, cfg):
    """Built, run with C poisoned with NaN and checked against float64, in a worker process
    (a misaligned store faults the CUDA context: that costs this case only)."""
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU")
    if cfg == "tuned":
        cfg = dataclasses.replace(step11_split_k.tuned_configs()[shape], stage_pads=1)
    elif cfg == "rule":  # the rule's best tiled config (its pick at N = 1 is the k_threads mode)
        cfg = dataclasses.replace(shape_rule.tiled_config(*shape), stage_pads=1)
    assert padding.staged_operands(cfg, *shape), cfg
    with harness.KernelRunner(repeat=3, seed=20261124) as runner:
        m = runner.measure(11, *shape, harness.gpu_arch(), config=cfg)
    assert m.ok, m.error
    assert m.rel_err is not None and m.rel_err <= harness.TOLERANCE, f"relative error {m.rel_err}"
    print(f"{_case_id(shape)} staged: {m.gflops / 1e3:.1f} TFLOPS")
