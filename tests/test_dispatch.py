"""The dispatch rule (schedules/dispatch.py, schedules.fastest): which step for which shape, from a
table of measurements, without a GPU. The committed table's picks are checked in test_gpu_bench.py."""

from __future__ import annotations

import json

import pytest

import schedules
from schedules import ConfigError, dispatch


def table(rows, steps=(11, 14, 19), arch="sm_90", gpu="Fake GPU", precision="fp32"):
    return dispatch.validate({"schema": dispatch.SCHEMA, "gpus": [{
        "gpu": gpu, "slug": gpu.lower().replace(" ", "-"), "arch": arch, "date": "2026-11-25T00:00:00+00:00",
        "precisions": {precision: {"steps": list(steps), "shapes": [list(s) + [list(t)] for s, t in rows]}}}]})


ROWS = [((4096, 4096, 4096), (3.0, 2.0, 1.1)),   # step 19 fastest
        ((512, 512, 512), (0.011, 0.010, 0.019)),  # step 14
        ((64, 64, 65536), (0.024, 0.5, 0.3)),      # step 11
        ((1, 4096, 4096), (0.027, None, None))]    # only step 11 ran


def test_a_measured_shape_gets_its_fastest_step_and_that_steps_config():
    doc = table(ROWS)
    for shape, expected in (((4096, 4096, 4096), 19), ((512, 512, 512), 14), ((64, 64, 65536), 11),
                            ((1, 4096, 4096), 11)):
        choice = schedules.fastest(*shape, doc=doc)
        assert choice.step.number == expected and "measured at this shape" in choice.why
        assert choice.config == choice.step.default_config(*shape)
        assert choice.measured_ms == min(t for t in dict(ROWS)[shape] if t is not None)


def test_an_unseen_shape_takes_the_pick_of_its_nearest_shape_in_log_space():
    doc = table(ROWS)
    near = schedules.fastest(3000, 3000, 3000, doc=doc)
    assert near.step.number == 19 and "nearest measured shape 4096x4096x4096" in near.why
    assert near.measured_ms is None
    assert schedules.fastest(600, 500, 400, doc=doc).step.number == 14
    # log distance: K = 32768 is one factor of two from 65536, while 512 is 64x from 32768
    assert schedules.fastest(100, 100, 32768, doc=doc).step.number == 11
    assert dispatch.log_distance((1, 2, 4), (2, 4, 8)) == pytest.approx(3 ** 0.5)


def test_steps_that_cannot_run_on_the_arch_are_never_picked():
    doc = table(ROWS, arch="sm_80")
    # an sm_80 table holding step 19 (it cannot run there): the best of the others
    assert schedules.fastest(4096, 4096, 4096, arch="sm_80", doc=doc).step.number == 14


def test_an_arch_without_a_table_gets_the_portable_rule():
    doc = table(ROWS)
    for arch in ("sm_80", "sm_86", "sm_89"):
        choice = schedules.fastest(4096, 4096, 4096, arch=arch, doc=doc)
        assert choice.step.number == 11 and "portable rule" in choice.why
    assert schedules.fastest(4096, 4096, 4096, precision="tf32", doc=doc).step.number == 13
    # sm_90a reads what sm_90 measured
    assert schedules.fastest(4096, 4096, 4096, arch="sm_90a", doc=doc).step.number == 19


def test_a_tf32_table_never_picks_an_fp32_step_and_vice_versa():
    doc = table([((2048, 2048, 2048), (0.2, 0.05))], steps=(13, 18), precision="tf32")
    assert schedules.fastest(2048, 2048, 2048, precision="tf32", doc=doc).step.number == 18
    assert schedules.fastest(2048, 2048, 2048, precision="fp32", doc=doc).step.number == 11  # no fp32 rows
    mixed = table([((2048, 2048, 2048), (0.2, 0.05))], steps=(11, 18))  # a tf32 step filed under fp32
    assert schedules.fastest(2048, 2048, 2048, doc=mixed).step.number == 11


def test_tf32_also_takes_the_same_gpus_fp32_accurate_steps_where_they_are_faster():
    """An fp32-accurate kernel meets TF32's tolerance: a TF32 query weighs the same GPU's fp32 rows
    beside its own (the matrix-vector products, where CUDA cores stream as fast), and `why` says
    whose rows; an fp32 query still never takes a TF32 step, and with no TF32 rows TF32 keeps the
    portable rule."""
    doc = table([((4096, 1, 4096), (0.0235, 0.030)), ((2048, 2048, 2048), (0.05, 0.06))], steps=(29, 23),
                precision="tf32")
    doc["gpus"][0]["precisions"]["fp32"] = {"steps": [11, 19], "date": "2026-11-24T00:00:00+00:00",
                                            "shapes": [[4096, 1, 4096, [0.0185, 0.065]], [2048, 2048, 2048, [0.38, 0.15]]]}
    dispatch.validate(doc)
    mv = schedules.fastest(4096, 1, 4096, precision="tf32", doc=doc)
    assert mv.step.number == 11 and mv.measured_ms == 0.0185
    assert mv.config == mv.step.default_config(4096, 1, 4096)
    assert "fastest of steps 29, 23 and the fp32-accurate 11, 19 (its rows of 2026-11-24)" in mv.why
    assert schedules.fastest(8192, 1, 4096, precision="tf32", doc=doc).step.number == 11  # its nearest row
    assert schedules.fastest(2048, 2048, 2048, precision="tf32", doc=doc).step.number == 29
    assert schedules.fastest(2048, 2048, 2048, precision="fp32", doc=doc).step.number == 19
    # fp32 rows alone do not answer TF32 (the 3xTF32 steps would win a square there): the portable rule.
    del doc["gpus"][0]["precisions"]["tf32"]
    assert schedules.fastest(4096, 1, 4096, precision="tf32", doc=doc).step.number == 13


def test_16_bit_precisions_pick_among_the_steps_with_that_dtype():
    """fp16 and bf16: the steps with that 16-bit form (Step.dtypes), each at its 16-bit config;
    with no rows, the portable rule (step 13, mma.sync), said in `why`."""
    for dtype in dispatch.SIXTEEN_BIT:
        portable = schedules.fastest(4096, 4096, 4096, precision=dtype, doc=table(ROWS))
        assert portable.step.number == 13 and portable.config.dtype == dtype
        assert f"no {dtype} measurements" in portable.why and "portable rule" in portable.why
        # Step 19 has no 16-bit form: filed under bf16 by mistake, it is never the pick.
        doc = table([((4096, 4096, 4096), (0.40, 0.21, 0.19, 0.05)), ((512, 512, 512), (0.01, 0.02, 0.03, 0.001))],
                    steps=(13, 18, 22, 19), precision=dtype)
        pick = schedules.fastest(4096, 4096, 4096, precision=dtype, doc=doc)
        assert pick.step.number == 22 and pick.config == pick.step.default_config(4096, 4096, 4096, dtype)
        assert "fastest of steps 13, 18, 22" in pick.why and pick.measured_ms == 0.19
        assert schedules.fastest(512, 512, 512, precision=dtype, doc=doc).step.number == 13
        # The other precisions' rows are not read, nor these by them.
        assert schedules.fastest(4096, 4096, 4096, precision="tf32", doc=doc).step.number == 13
        assert schedules.fastest(4096, 4096, 4096, doc=doc).step.number == 11
        # What it picks builds for that dtype.
        lib = schedules.build(pick.step, 4096, 4096, 4096, arch="sm_90a", config=pick.config, dtype=dtype)
        assert {"fp16": "half", "bf16": "nv_bfloat16"}[dtype] in schedules.cuda_source(lib)


def test_a_16_bit_dtype_without_rows_reads_the_other_ones():
    """fp16 with bf16 rows only (the H100 today): bf16's pick, built in fp16, and `why` says whose
    rows; no time of this kernel is claimed. Where neither has rows, the portable rule."""
    doc = table([((4096, 4096, 4096), (0.40, 0.19)), ((512, 512, 512), (0.01, 0.03))], steps=(13, 22), precision="bf16")
    pick = schedules.fastest(4096, 4096, 4096, precision="fp16", doc=doc)
    assert pick.step.number == 22 and pick.config == pick.step.default_config(4096, 4096, 4096, "fp16")
    assert "bf16's rows: no fp16 measurements" in pick.why and pick.measured_ms is None
    assert schedules.fastest(512, 512, 512, precision="fp16", doc=doc).step.number == 13
    own = schedules.fastest(4096, 4096, 4096, precision="bf16", doc=doc)
    assert own.measured_ms == 0.19 and "rows:" not in own.why
    assert schedules.fastest(4096, 4096, 4096, precision="tf32", doc=doc).step.number == 13  # 32-bit: never
    assert "portable rule" in schedules.fastest(4096, 4096, 4096, precision="fp16", doc=table(ROWS)).why


@pytest.mark.parametrize("kwargs, words", [
    (dict(precision="fp8"), "precision"),
    (dict(precision="FP16"), "precision"),
    (dict(arch="sm_75"), "unknown arch"),
    (dict(gpu="No Such GPU"), "no dispatch table for GPU"),
])
def test_bad_input_is_one_line(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        schedules.fastest(64, 64, 64, doc=table(ROWS), **kwargs)
    with pytest.raises(ConfigError, match="positive"):
        schedules.fastest(0, 64, 64)


def test_a_broken_table_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="not a dispatch-1 table"):
        dispatch.validate({"schema": "x"})
    bad = table(ROWS)
    bad["gpus"][0]["precisions"]["fp32"]["shapes"][0][3] = [1.0]
    with pytest.raises(ConfigError, match="one time per step"):
        dispatch.validate(bad)
    path = tmp_path / "dispatch.json"
    path.write_text("{")
    with pytest.raises(ConfigError, match="not JSON"):
        dispatch._load(str(path))


def test_the_committed_table_is_valid_and_covers_the_shape_set():
    from steps.results import shapeset

    doc = dispatch.table()
    if not doc["gpus"]:
        pytest.skip("no dispatch table committed yet (python -m steps.bench --save on a GPU writes it)")
    every = {s for _, s in shapeset.load().shapes()}
    for entry in doc["gpus"]:
        # Each GPU's rows of each precision it was measured in (the first GPU in all four; a GPU
        # measured in fewer takes the first's rows in the others: the next test).
        assert entry["precisions"] and (entry is not doc["gpus"][0] or "fp32" in entry["precisions"])
        for precision, rows in entry["precisions"].items():
            assert {tuple(r[:3]) for r in rows["shapes"]} == every, (entry["slug"], precision)
            assert all(dispatch.computes(schedules.get_step(n), precision) for n in rows["steps"])
            # every measured shape picks a step the table timed there, the fastest of those meant for
            # the shape (step 24 is for M <= 16: a row of 2026-11-27 timed it everywhere); TF32's
            # candidates include the GPU's fp32-accurate rows (dispatch.ALSO_SERVES)
            also = entry["precisions"].get(dispatch.ALSO_SERVES.get(precision), {"steps": [], "shapes": []})
            theirs = {tuple(r[:3]): r[3] for r in also["shapes"]}
            for M, N, K, times in rows["shapes"]:
                choice = schedules.fastest(M, N, K, precision=precision, gpu=entry["slug"])
                meant = [t for n, t in zip(rows["steps"] + also["steps"], times + theirs.get((M, N, K), []))
                         if t is not None and schedules.get_step(n).applies_to(M, N, K)]
                assert choice.measured_ms == min(meant), (entry["slug"], precision, (M, N, K))
    assert json.loads(dispatch.TABLE_PATH.read_text())["schema"] == dispatch.SCHEMA


def test_a_gpu_with_rows_of_its_own_takes_them_and_another_takes_the_familys_first():
    """What steps.bench and steps.model pass as ``gpu`` (the driver's name of the GPU they run on):
    that GPU's entry where the table has one, else None, the first entry of the arch's family."""
    first, second = table(ROWS, gpu="GPU One"), table([((4096, 4096, 4096), (3.0, 1.0, 2.0))], gpu="GPU Two")
    doc = dispatch.validate({**first, "gpus": first["gpus"] + second["gpus"]})
    assert dispatch.table_gpu("GPU Two", doc) == "GPU Two" and dispatch.table_gpu("GPU Three", doc) is None
    assert dispatch.table_gpu(None, doc) is None
    assert schedules.fastest(4096, 4096, 4096, gpu=dispatch.table_gpu("GPU Two", doc), doc=doc).step.number == 14
    assert schedules.fastest(4096, 4096, 4096, gpu=dispatch.table_gpu("GPU Three", doc), doc=doc).step.number == 19


def test_a_gpu_measured_in_one_precision_takes_the_familys_rows_in_the_others():
    first = table(ROWS, gpu="GPU One")
    second = table([((4096, 4096, 4096), (3.0, 1.0))], steps=(13, 18), gpu="GPU Two", precision="bf16")
    doc = dispatch.validate({**first, "gpus": first["gpus"] + second["gpus"]})
    fp32 = schedules.fastest(4096, 4096, 4096, gpu="GPU Two", doc=doc)
    assert fp32.step.number == 19 and "(GPU One, 2026-11-25; no fp32 rows of GPU Two)" in fp32.why
    assert schedules.fastest(4096, 4096, 4096, precision="bf16", gpu="GPU Two", doc=doc).step.number == 18
    # fp16 takes the named GPU's bf16 rows (the same kernels) before another GPU's
    fp16 = schedules.fastest(4096, 4096, 4096, precision="fp16", gpu="GPU Two", doc=doc)
    assert fp16.step.number == 18 and "bf16's rows" in fp16.why


def test_a_host_time_picks_the_kernel_issued_sooner_only_where_kernels_are_short():
    """``choose(..., host=)``: the least of max(the row's time scaled to the query's FLOPs, the
    host's time to issue the step's kernels), among steps within HOST_BOUND_WINDOW of the fastest."""
    doc = table([((32, 8192, 2048), (0.0076, 0.0083, 0.0225))], steps=(23, 26, 20), precision="bf16")
    issue = {23: 6.0, 26: 3.0, 20: 3.0}  # us: step 23 launches two kernels here, 26 and 20 one
    asked = []

    def host(step, cfg):
        asked.append(step.number)
        return issue[step.number]

    def pick(M, N, K, **kw):
        return dispatch.choose(M, N, K, "bf16", "sm_90", schedules.STEPS, doc=doc, **kw)

    assert pick(16, 3072, 1024).step.number == 23  # without a host time: the fastest at the row
    small = pick(16, 3072, 1024, host=host)  # ~0.7 us of kernels: the host sets the pace
    assert small.step.number == 26 and "quickest to issue and run" in small.why and "over step 23" in small.why
    assert 20 not in asked  # 3x the fastest at the row: outside the window, never asked
    asked.clear()
    big = pick(32, 8192, 2048, host=host)  # 7.6 us of kernels: longer than the host's 6
    assert big.step.number == 23 and big.why.startswith("fastest") and asked == [23]
    # a step as quick to issue but 30% slower at the row stays out of time_evaluator's rows (the
    # host evened short kernels' times there); rows of kernel time (CUDA graphs) ask it up to 1.5x
    doc = table([((32, 8192, 2048), (0.0076, 0.0099))], steps=(23, 26), precision="bf16")
    assert pick(16, 3072, 1024, host=host).step.number == 23
    doc["gpus"][0]["precisions"]["bf16"]["timer"] = dispatch.GRAPH_TIMER
    assert pick(16, 3072, 1024, host=host).step.number == 26
    doc["gpus"][0]["precisions"]["bf16"]["shapes"][0][3] = [0.0076, 0.0122]  # 1.6x: out of both
    assert pick(16, 3072, 1024, host=host).step.number == 23
