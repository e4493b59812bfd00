"""CPU checks of steps 7-10: each step's idea is visible in its TVMScript or generated CUDA.

Step 7: cp.async into `stages` shared buffers; step 8: permuted, padded shared tiles; step 9:
warps of 32 lanes on threadIdx.x and rasterized blocks; step 10: the unrolled k slice and the
committed per-size configs. Plus the config sweep's candidate filter and command line.
No GPU needed; every build is cached for the session.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
import subprocess
import sys

import pytest

import schedules
from schedules import ConfigError, step10_tuned
from schedules.config import (
    MAX_SHARED_BYTES,
    AsyncCopyConfig,
    ConflictFreeConfig,
    CooperativeFetchConfig,
    TunedConfig,
    WarpTileConfig,
)
from steps.commands import sweep
from steps.measure import harness

from .checks import config_error, one_line_error

N = 256  # every build here is 256^3 unless it says otherwise: small, and all ideas show


@functools.lru_cache(maxsize=None)
def _lib(number: int, n: int = N, config=None):
    return schedules.build(number, n, n, n, config=config)


def _cuda(number: int, n: int = N, config=None) -> str:
    return schedules.cuda_source(_lib(number, n, config))


@functools.lru_cache(maxsize=None)
def _script(number: int, n: int = N, config=None) -> str:
    return schedules.get_step(number).schedule(n, n, n, config).mod.script()


def _as(cls, cfg, **extra):
    """The same tiles as `cfg`, as a config of class `cls` (dropping fields cls lacks)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in {**cfg.as_dict(), **extra}.items() if k in names})


def _coefficient(expr: str, term: str) -> int:
    """The constant `term` is multiplied by in an index expression (1 when it appears bare).
    A loop variable (`ax0`) also matches its renamed copies in the pipeline's prologue and
    epilogue (`ax0_2`)."""
    pattern = re.escape(term) + (r"(?:_\d+)?\b" if re.fullmatch(r"\w+", term) else "")
    m = re.search(rf"\(?{pattern}\)? \* (\d+)\)", expr)
    if m:
        return int(m[1])
    assert re.search(pattern, expr), (term, expr)
    return 1


def _fragment_loads(src: str, op: str) -> list[str]:
    """Right-hand sides of the shared -> register (float4) fragment loads of `op`."""
    loads = []
    for line in src.splitlines():
        # (an unrolled k slice numbers its copies: A_shared_local_ptr_1, _2, ...)
        m = re.match(rf"\s*\*\(float4\*\)\({op}_shared(?:_dyn)?_local_ptr(?:_\d+)? \+ .*\) = (?P<rhs>.*);$", line)
        if m:
            loads.append(m["rhs"])
    return loads


def _k_outer_body(src: str) -> tuple[re.Match, str]:
    m = re.search(r"for \(int (k_0\w*) = 0; \1 < (\d+); \+\+\1\) \{", src)
    assert m, "no k_outer loop"
    depth = 0
    for i in range(src.index("{", m.start()), len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return m, src[m.start() : i + 1]
    raise AssertionError("unbalanced braces")


# --- step 7: cp.async multi-stage pipeline ------------------------------------------------

STEP7_TILE = dict(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=16)


def test_step7_pass_config_turns_on_async_copy():
    step7 = schedules.get_step(7)
    assert step7.pass_config.get("tirx.use_async_copy") is True
    assert step7.pass_config.get("tirx.disable_storage_rewrite") is True
    for number in (8, 9, 10):  # the later steps keep cp.async
        assert schedules.get_step(number).pass_config.get("tirx.use_async_copy") is True
    for number in range(1, 7):
        assert "tirx.use_async_copy" not in schedules.get_step(number).pass_config


@pytest.mark.parametrize("stages", (2, 3, 4))
def test_step7_copies_with_cp_async_into_stages_buffers(stages):
    cfg = AsyncCopyConfig(**STEP7_TILE, stages=stages)
    src = _cuda(7, config=cfg)
    # The 16-byte global -> shared copy instruction, its commit groups and waits.
    assert "cp.async.cg.shared.global" in src
    wrapper = re.search(r"__device__ void (\w*cp_async\w*)\(void\* dst, int dst_off, void\* src, int src_off\)", src)
    assert wrapper, "no cp.async wrapper"
    body = src[wrapper.end() : src.index("}", wrapper.end())]
    assert "cp.async.cg.shared.global" in body and '"n"(16)' in body, body
    assert "cp.async.commit_group;" in src
    assert "cp.async.wait_group" in src
    calls = re.findall(rf"^\s*{wrapper[1]}\(([AB])_shared_ptr, ", src, re.M)
    assert set(calls) == {"A", "B"}
    # No plain stores into shared memory: every copy is a cp.async.
    assert not re.search(r"^\s*(?:\*\(float4\*\)\()?[AB]_shared_ptr\b[^=]*= ", src, re.M)
    # `stages` versions of each shared tile: exactly the config's bytes.
    decl = dict(re.findall(r"__shared__ alignas\(\d+\) float ([AB])_shared_ptr\[(\d+)\];", src))
    assert {k: int(v) for k, v in decl.items()} == {
        "A": stages * cfg.block_m * cfg.block_k, "B": stages * cfg.block_k * cfg.block_n,
    }
    assert (int(decl["A"]) + int(decl["B"])) * 4 == cfg.shared_bytes
    # The pipeline: stages - 1 slices committed before k_outer, which runs the rest; inside,
    # each iteration fills buffer (k + stages - 1) mod stages, commits once and waits until
    # at most stages - 1 groups are pending (so slice k has landed).
    loop, body = _k_outer_body(src)
    slices = N // cfg.block_k
    assert int(loop[2]) == slices - (stages - 1)
    commit = r"^\s*\w*commit_group\w*\(\);"
    assert len(re.findall(commit, src[: loop.start()], re.M)) == stages - 1
    assert len(re.findall(commit, body, re.M)) == 1
    assert re.findall(r"wait_group_(\d+)\(\);", body) == [str(stages - 1)]
    mod = rf"\(\(k_0 \+ {stages - 1}\) (?:% {stages}|& {stages - 1})\)"
    for op, tile in (("A", cfg.block_m * cfg.block_k), ("B", cfg.block_k * cfg.block_n)):
        assert re.search(rf"{wrapper[1]}\({op}_shared_ptr, \(*{mod} \* {tile}\)", body), (op, body)
    # The epilogue drains the pipeline: wait_group stages-2 ... 0.
    waits = [int(w) for w in re.findall(r"wait_group_(\d+)\(\);", src[loop.start() + len(body) :])]
    assert waits == list(range(stages - 2, -1, -1))


def test_step7_differs_from_step5_by_the_async_pipeline():
    """Step 7 builds on step 5 (not 6): the same tiles in step 5 have one buffer, no cp.async."""
    cfg7 = AsyncCopyConfig(**STEP7_TILE, stages=3)
    src5 = _cuda(5, config=_as(CooperativeFetchConfig, cfg7))
    assert "cp.async" not in src5 and "commit_group" not in src5
    assert not re.search(r"\b[AB]_local(?:_ptr)?\b", src5)
    src7 = _cuda(7, config=cfg7)
    assert not re.search(r"\b[AB]_local(?:_ptr)?\b", src7), "step 7 should not stage in registers"
    script = _script(7, config=cfg7)
    assert '"software_pipeline_async_stages": [0]' in script
    assert '"software_pipeline_stage": [0, 0, 2]' in script


@pytest.mark.parametrize("stages", (0, 1, 5, True, 3.0))
def test_step7_stages_range(stages):
    cfg = AsyncCopyConfig(**STEP7_TILE, stages=stages)
    config_error(lambda: cfg.validate(N, N, N), "stages", "2, 3 or 4")
    config_error(lambda: schedules.get_step(7).schedule(N, N, N, cfg), "stages")


# --- step 8: permuted and padded shared tiles ---------------------------------------------

STEP8_WIDE = dict(block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=16, stages=3)  # thread_n 8


def test_step8_pads_and_permutes_A_rows():
    """Default at 256 (block_k 16, pad_a 4): a thread's A rows are threads_m rows apart, each
    block_k + pad_a = 20 floats long; in step 7 they are adjacent rows of 16."""
    cfg8 = schedules.get_step(8).default_config(N, N, N)
    assert (cfg8.block_k, cfg8.pad_a) == (16, 4)
    cfg7 = _as(AsyncCopyConfig, cfg8)
    assert cfg7 == schedules.get_step(7).default_config(N, N, N)
    stride = cfg8.block_k + cfg8.pad_a
    loads8, loads7 = _fragment_loads(_cuda(8), "A"), _fragment_loads(_cuda(7), "A")
    assert loads8 and loads7
    for rhs in loads8:
        assert rhs.startswith("*(float4*)(A_shared_ptr + "), rhs  # still one float4 per load
        assert "threadIdx.y) * 20)" in rhs, rhs
        assert _coefficient(rhs, "((int)threadIdx.y)") == stride
        assert _coefficient(rhs, "ax0") == cfg8.threads_m * stride  # the thread's next row
    for rhs in loads7:
        assert _coefficient(rhs, "((int)threadIdx.y)") == cfg7.thread_m * cfg7.block_k
        assert _coefficient(rhs, "ax0") == cfg7.block_k
    # Shared A is stages x block_m rows of block_k + pad_a.
    decl = re.search(r"__shared__ alignas\(\d+\) float A_shared_ptr\[(\d+)\];", _cuda(8))
    assert int(decl[1]) == cfg8.stages * cfg8.block_m * stride


@pytest.mark.parametrize("block_k, pad_a", [(16, 0), (16, 4), (32, 4), (32, 8)])
def test_step8_row_stride_is_block_k_plus_pad(block_k, pad_a):
    cfg = ConflictFreeConfig(**{**STEP8_WIDE, "block_k": block_k}, pad_a=pad_a)
    cfg.validate(N, N, N)
    loads = _fragment_loads(_cuda(8, config=cfg), "A")
    assert loads
    for rhs in loads:
        assert _coefficient(rhs, "((int)threadIdx.y)") == block_k + pad_a, rhs


def test_step8_permutes_B_for_8_wide_micro_tiles():
    """thread_n = 8: a thread's two float4s of a B row go 4 x threads_n floats apart and the
    threads' float4s are adjacent (threadIdx.x * 4); step 7 keeps each thread's 8 together."""
    cfg8 = ConflictFreeConfig(**STEP8_WIDE, pad_a=4)
    cfg7 = _as(AsyncCopyConfig, cfg8)
    loads8, loads7 = _fragment_loads(_cuda(8, config=cfg8), "B"), _fragment_loads(_cuda(7, config=cfg7), "B")
    assert loads8 and loads7
    for rhs in loads8:
        assert rhs.startswith("*(float4*)(B_shared_ptr + "), rhs
        assert _coefficient(rhs, "((int)threadIdx.x)") == 4, rhs
        assert _coefficient(rhs, "ax1_0") == 4 * cfg8.threads_n, rhs
    for rhs in loads7:
        assert _coefficient(rhs, "((int)threadIdx.x)") == cfg7.thread_n, rhs
        assert _coefficient(rhs, "ax1_0") == 4, rhs


def test_step8_leaves_B_alone_for_4_wide_micro_tiles():
    cfg8 = schedules.get_step(8).default_config(N, N, N)
    assert cfg8.thread_n == 4
    for rhs in _fragment_loads(_cuda(8), "B"):
        assert _coefficient(rhs, "((int)threadIdx.x)") == 4, rhs
    script = _script(8)
    # transform_layout rewrote A's shared buffer only: A_shared gets a leading tile axis.
    assert re.search(r"A_shared = T\.sblock_alloc_buffer\(\(\d+, \d+, \d+\)", script), script[:600]
    assert re.search(r"B_shared = T\.sblock_alloc_buffer\(\(\d+, \d+\)", script)


def test_step8_large_pad_is_applied_or_rejected():
    cfg = ConflictFreeConfig(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=16, stages=2, pad_a=32)
    try:
        cfg.validate(N, N, N)
    except ConfigError:
        return  # rejecting a pad of a whole bank cycle or more is fine too
    decl = re.search(r"__shared__ alignas\(\d+\) float A_shared_ptr\[(\d+)\];", _cuda(8, config=cfg))
    assert int(decl[1]) == cfg.stages * cfg.block_m * (cfg.block_k + cfg.pad_a)


@pytest.mark.parametrize("pad_a", (1, 2, 3, 6, -4, True, 4.0))
def test_step8_pad_must_be_whole_float4s(pad_a):
    cfg = ConflictFreeConfig(**STEP8_WIDE, pad_a=pad_a)
    config_error(lambda: cfg.validate(N, N, N), "pad_a", "multiple of 4")
    config_error(lambda: schedules.get_step(8).schedule(N, N, N, cfg), "pad_a")
    config_error(lambda: schedules.build(8, N, N, N, config=cfg), "pad_a")


STEP8_TRANSPOSED = ConflictFreeConfig(**STEP8_WIDE, pad_a=4, transpose_a=1)


def test_step8_transposed_A_is_k_major_with_per_k_fragments():
    """transpose_a: A is stored k-major (block_k rows of block_m + pad_a floats), filled by
    4-byte cp.async (a thread's 4 floats of a global row land in 4 shared rows) while B keeps
    its 16-byte copies; one k step's A fragment is thread_m floats, loaded as float4s along m,
    interleaved by thread like B (threadIdx * 4, the thread's next float4 4 x threads_m on)."""
    cfg = STEP8_TRANSPOSED
    src = _cuda(8, config=cfg)
    decl = re.search(r"__shared__ alignas\(\d+\) float A_shared_ptr\[(\d+)\];", src)
    assert int(decl[1]) == cfg.stages * cfg.block_k * (cfg.block_m + cfg.pad_a) == cfg.shared_bytes // 4 - \
        cfg.stages * cfg.block_k * cfg.block_n
    assert re.search(r"ptx_cp_async\w*_4_4_4\(A_shared_ptr", src)
    assert not re.search(r"ptx_cp_async\w*_16_4_4\(A_shared_ptr", src)
    assert re.search(r"ptx_cp_async\w*_16_4_4\(B_shared_ptr", src)
    assert re.search(r"float A_shared_local_ptr\[%d\];" % cfg.thread_m, src)
    loads = _fragment_loads(src, "A")
    assert loads
    for rhs in loads:
        assert rhs.startswith("*(float4*)(A_shared_ptr + "), rhs
        assert _coefficient(rhs, "((int)threadIdx.y)") == 4, rhs
        assert _coefficient(rhs, "ax0_0") == 4 * cfg.threads_m, rhs
        # consecutive k steps are rows of block_m + pad_a floats
        assert "* %d)" % (cfg.block_m + cfg.pad_a) in rhs, rhs
    assert re.search(r"float B_shared_local_ptr\[%d\];" % cfg.thread_n, src)
    # m-major (transpose_a 0) keeps 16-byte copies and fragments of a run of 4 k steps.
    plain = _cuda(8, config=dataclasses.replace(cfg, transpose_a=0))
    assert not re.search(r"ptx_cp_async\w*_4_4_4\(", plain)
    assert re.search(r"float A_shared_local_ptr\[%d\];" % (cfg.thread_m * cfg.vector), plain)
    assert re.search(r"float B_shared_local_ptr\[%d\];" % (cfg.vector * cfg.thread_n), plain)


@pytest.mark.parametrize("value", (2, -1, True, 1.0))
def test_step8_transpose_a_is_0_or_1(value):
    cfg = ConflictFreeConfig(**STEP8_WIDE, pad_a=0, transpose_a=value)
    config_error(lambda: cfg.validate(N, N, N), "transpose_a")
    config_error(lambda: schedules.build(8, N, N, N, config=cfg), "transpose_a")


def test_step8_transposed_A_builds_for_odd_shapes():
    """Padding (schedules/transforms/padding.py) inlines into the 4-byte copies: predicated, zero-filled."""
    cfg = STEP8_TRANSPOSED
    src = schedules.cuda_source(schedules.build(8, 100, 200, 72, config=cfg))
    assert re.search(r"ptx_cp_async_\w*pred\w*_4_4_4\(", src)  # A's predicated 4-byte copies
    assert re.search(r"ptx_cp_async_\w*pred\w*_16_4_4\(", src)  # B's 16-byte ones
    src0 = schedules.cuda_source(schedules.build(8, 100, 200, 72, config=dataclasses.replace(cfg, transpose_a=0)))
    assert not re.search(r"ptx_cp_async\w*_4_4_4\(", src0)


# --- step 9: warp tiling, rasterization ---------------------------------------------------


def _bindings(script: str, axis: str) -> list[int]:
    return [int(e) for e in re.findall(rf'T\.thread_binding\((\d+), thread="{re.escape(axis)}"\)', script)]


def test_step9_binds_32_lanes_to_threadIdx_x():
    cfg9 = schedules.get_step(9).default_config(N, N, N)
    script9 = _script(9)
    xs, ys = _bindings(script9, "threadIdx.x"), _bindings(script9, "threadIdx.y")
    # The compute nest and both cooperative copies bind the same (warp, lane) axes.
    assert len(xs) == len(ys) == 3
    assert set(xs) == {32}
    assert set(ys) == {cfg9.threads // 32}
    src9 = _cuda(9)
    assert set(re.findall(r"__launch_bounds__\((\d+)\)", src9)) == {str(cfg9.threads)}
    # Step 8 at the same tiles: threadIdx.x is a row of threads_n threads, not a warp.
    assert cfg9.threads_n != 32
    script8 = _script(8, config=_as(ConflictFreeConfig, cfg9))
    assert set(_bindings(script8, "threadIdx.x")) == {cfg9.threads_n}
    assert set(_bindings(script8, "threadIdx.y")) == {cfg9.threads_m}


@pytest.mark.parametrize("warp_m", (2, 4, 8))
def test_step9_warp_shape(warp_m):
    """A warp is warp_m x 32/warp_m threads of the grid: lane // warp_n picks the thread's
    row of micro-tiles, lane % warp_n its column."""
    cfg = WarpTileConfig(block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=16, stages=2,
                         pad_a=4, warp_m=warp_m)
    cfg.validate(N, N, N)
    script = _script(9, config=cfg)
    assert set(_bindings(script, "threadIdx.x")) == {32}
    assert set(_bindings(script, "threadIdx.y")) == {cfg.threads // 32}
    init = script[script.index('T.sblock("C_init")') :]
    vi = re.search(r"vi = T\.axis\.spatial\(\d+, (.*)\)\n", init)[1]
    vj = re.search(r"vj = T\.axis\.spatial\(\d+, (.*)\)\n", init)[1]
    lane = "i_1_1_j_1_1_fused"
    assert f"{lane} // {cfg.warp_n} * {cfg.thread_m} " in vi, vi
    assert f"{lane} % {cfg.warp_n} * {cfg.thread_n} " in vj, vj


@pytest.mark.parametrize(
    "fields, words",
    [
        # threads_m = 4: warp_m 8 does not divide it.
        (dict(block_m=32, block_n=64, thread_m=8, thread_n=4, warp_m=8), ("warp_m", "divide", "4")),
        # threads_n = 16: 32 / warp_m = 32 does not divide it.
        (dict(block_m=32, block_n=64, thread_m=4, thread_n=4, warp_m=1), ("32 / warp_m", "divide", "16")),
        (dict(warp_m=3), ("warp_m", "power of two")),
        (dict(warp_m=64), ("warp_m", "power of two")),
    ],
    ids=("warp_m-vs-threads_m", "warp_n-vs-threads_n", "warp_m-3", "warp_m-64"),
)
def test_step9_warp_must_tile_the_thread_grid(fields, words):
    cfg = WarpTileConfig(block_k=16, stages=2, **fields)
    config_error(lambda: cfg.validate(N, N, N), *words)
    config_error(lambda: schedules.get_step(9).schedule(N, N, N, cfg), words[0])


def test_step9_raster_fuses_the_block_loops():
    n = 512
    base = schedules.get_step(9).default_config(n, n, n)
    assert base.raster == 1
    script1 = _script(9, n)
    assert _bindings(script1, "blockIdx.y") == [n // base.block_m]
    assert _bindings(script1, "blockIdx.x") == [n // base.block_n]
    raster = 4
    cfg = dataclasses.replace(base, raster=raster)
    script = _script(9, n, cfg)
    blocks = (n // cfg.block_m) * (n // cfg.block_n)
    assert _bindings(script, "blockIdx.x") == [blocks]
    assert _bindings(script, "blockIdx.y") == []
    src = _cuda(9, n, cfg)
    assert "blockIdx.y" not in src and "blockIdx.x" in src
    # Within a group, blockIdx.x % raster picks the block column (B's offset, block_n apart).
    assert f"(((int)blockIdx.x) & {raster - 1}) * {cfg.block_n})" in src
    assert "blockIdx.y" in _cuda(9, n)


# --- step 10: unroll + tuned configs ------------------------------------------------------


def _tuned_entries() -> dict[tuple[int, int, int], dict]:
    data = json.loads(step10_tuned.TUNED_PATH.read_text())
    return {(e["M"], e["N"], e["K"]): e["config"] for e in data["configs"]}


def test_step10_defaults_are_the_tuned_file():
    entries = _tuned_entries()
    assert entries, "schedules/tuned/step10.json has no configs"
    assert {(512,) * 3, (1024,) * 3, (2048,) * 3} <= set(entries)
    step10 = schedules.get_step(10)
    for (M, N_, K), fields in entries.items():
        cfg = step10.default_config(M, N_, K)
        assert type(cfg) is TunedConfig
        assert cfg.as_dict() == fields  # every field given in the file, none defaulted
        cfg.validate(M, N_, K)
    assert step10_tuned.tuned_configs() == {size: TunedConfig(**f) for size, f in entries.items()}


@pytest.mark.parametrize("shape", [(256, 256, 256), (1500, 1500, 1500), (4096, 4096, 4096),
                                   (1, 2048, 2048), (2048, 2048, 1), (700, 1000, 1500)],
                         ids=lambda s: "x".join(map(str, s)))
def test_step10_untuned_size_takes_the_nearest_by_volume(shape):
    entries = _tuned_entries()
    M, N_, K = shape
    assert shape not in entries
    nearest = min(entries, key=lambda s: abs(s[0] * s[1] * s[2] - M * N_ * K))
    assert schedules.get_step(10).default_config(M, N_, K) == TunedConfig(**entries[nearest])


def test_step10_nearest_picks_the_right_neighbour():
    # 1500^3 = 3.4e9 is nearer 1024^3 (1.1e9) than 2048^3 (8.6e9); 1800^3 = 5.8e9 is nearer 2048^3.
    step10 = schedules.get_step(10)
    entries = _tuned_entries()
    assert step10.default_config(1500, 1500, 1500) == TunedConfig(**entries[(1024,) * 3])
    assert step10.default_config(1800, 1800, 1800) == TunedConfig(**entries[(2048,) * 3])


def test_step10_without_a_tuned_file_falls_back_to_step9_unrolled(monkeypatch):
    monkeypatch.setattr(step10_tuned, "tuned_configs", lambda path=None: {})
    for n in (512, 2048):
        cfg = schedules.get_step(10).default_config(n, n, n)
        assert cfg == TunedConfig(**schedules.get_step(9).default_config(n, n, n).as_dict(), unroll_k=1)


def test_step10_missing_file_is_empty(tmp_path):
    assert step10_tuned.tuned_configs(tmp_path / "nope.json") == {}


STEP10_CFG = TunedConfig(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=32, stages=3, pad_a=4,
                         warp_m=4, raster=1, unroll_k=1)


def test_step10_unrolls_the_k_slice():
    runs = STEP10_CFG.block_k // STEP10_CFG.vector
    rolled = dataclasses.replace(STEP10_CFG, unroll_k=0)
    script_u, script_r = _script(10, config=STEP10_CFG), _script(10, config=rolled)
    assert re.search(rf"for k_1_0 in T\.unroll\({runs}\):", script_u), "k slice not unrolled"
    assert re.search(rf"for k_1_0 in range\({runs}\):", script_r)
    # unroll_k = 0 is exactly step 9's schedule.
    assert script_r == _script(9, config=_as(WarpTileConfig, STEP10_CFG))
    # In CUDA the unrolled slice has no loop over its runs: `runs` A fragment loads per slice.
    src_u, src_r = _cuda(10, config=STEP10_CFG), _cuda(10, config=rolled)
    assert "for (int k_1_0" in src_r
    assert "for (int k_1_0" not in src_u
    _, body_u = _k_outer_body(src_u)
    _, body_r = _k_outer_body(src_r)
    assert len(_fragment_loads(body_u, "A")) == runs * len(_fragment_loads(body_r, "A"))


@pytest.mark.parametrize("unroll_k", (2, -1, True))
def test_step10_unroll_k_is_0_or_1(unroll_k):
    cfg = dataclasses.replace(STEP10_CFG, unroll_k=unroll_k)
    config_error(lambda: cfg.validate(N, N, N), "unroll_k")


GOOD_ENTRY = {"M": 512, "N": 512, "K": 512, "config": STEP10_CFG.as_dict()}
MALFORMED = {
    "no-config": {"configs": [{"M": 512, "N": 512, "K": 512}]},
    "no-M": {"configs": [{"N": 512, "K": 512, "config": STEP10_CFG.as_dict()}]},
    "unknown-field": {"configs": [GOOD_ENTRY, {**GOOD_ENTRY, "M": 1024, "config": {"block_mm": 64}}]},
    "config-not-a-dict": {"configs": [{**GOOD_ENTRY, "config": [64, 64]}]},
    "config-null": {"configs": [{**GOOD_ENTRY, "config": None}]},
    "entry-not-a-dict": {"configs": ["512x512x512"]},
    "size-a-list": {"configs": [{**GOOD_ENTRY, "M": [512]}]},
}


def test_step10_tuned_file_round_trip(tmp_path):
    path = tmp_path / "step10.json"
    path.write_text(json.dumps({"step": 10, "configs": [GOOD_ENTRY]}))
    assert step10_tuned.tuned_configs(path) == {(512, 512, 512): STEP10_CFG}


@pytest.mark.parametrize("case", MALFORMED)
def test_step10_malformed_tuned_file(tmp_path, case):
    path = tmp_path / "step10.json"
    path.write_text(json.dumps(MALFORMED[case]))
    config_error(lambda: step10_tuned.tuned_configs(path))


BROKEN_FILES = {
    "not-json": '{"configs": [',
    "empty": "",
    "top-level-list": "[1, 2]",
    "configs-not-a-list": '{"configs": 5}',
}


@pytest.mark.parametrize("case", BROKEN_FILES)
def test_step10_unreadable_tuned_file(tmp_path, case):
    path = tmp_path / "step10.json"
    path.write_text(BROKEN_FILES[case])
    with pytest.raises(ConfigError) as info:
        step10_tuned.tuned_configs(path)
    assert "\n" not in str(info.value) and "step10.json" in str(info.value)


# --- the config sweep ---------------------------------------------------------------------


@pytest.mark.parametrize("number", (4, 7, 10))
@pytest.mark.parametrize("arch", ("sm_90", "sm_86"))
def test_sweep_candidates_are_valid_and_worth_timing(number, arch):
    step = schedules.get_step(number)
    M = N_ = K = 512
    total = 0
    names = {f.name for f in dataclasses.fields(step.Config)}
    for label, space in sweep.STAGES:
        base = step.default_config(M, N_, K)
        got = sweep.candidates(step, M, N_, K, arch, space, base)
        total += len(got)
        assert len(set(got)) == len(got), f"duplicates in {label}"
        # Independently: every combination of the step's fields in `space` that validates,
        # fits the arch, has 64-512 threads and launches at least MIN_BLOCKS blocks.
        axes = {k: v for k, v in space.items() if k in names}
        expected = []
        for values in itertools.product(*axes.values()):
            cfg = dataclasses.replace(base, **dict(zip(axes, values)))
            try:
                cfg.validate(M, N_, K)
                cfg.check_shared_memory(arch)
            except ConfigError:
                continue
            blocks = -(-M // cfg.block_m) * -(-N_ // cfg.block_n)
            if 64 <= cfg.threads <= 512 and blocks >= sweep.MIN_BLOCKS and cfg not in expected:
                expected.append(cfg)
        assert got == expected, label
        for cfg in got:
            assert type(cfg) is step.Config
            cfg.validate(M, N_, K)
            cfg.check_shared_memory(arch)
            assert 64 <= cfg.threads <= 512
            assert -(-M // cfg.block_m) * -(-N_ // cfg.block_n) >= sweep.MIN_BLOCKS
    assert total > 0
    assert set(sweep.THREADS) <= set(range(64, 513))


def test_sweep_candidates_reject_what_the_arch_cannot_hold():
    step = schedules.get_step(7)
    base = AsyncCopyConfig(block_m=64, block_n=64, thread_m=4, thread_n=4, block_k=64, stages=2)
    space = {"stages": (2, 3, 4), "block_k": (32, 64)}
    n = 1024
    by_arch = {arch: sweep.candidates(step, n, n, n, arch, space, base) for arch in ("sm_90", "sm_86")}
    sizes90 = {c.shared_bytes for c in by_arch["sm_90"]}
    sizes86 = {c.shared_bytes for c in by_arch["sm_86"]}
    assert max(sizes90) > MAX_SHARED_BYTES["sm_86"] >= max(sizes86)
    assert set(by_arch["sm_86"]) == {c for c in by_arch["sm_90"] if c.shared_bytes <= MAX_SHARED_BYTES["sm_86"]}


def test_sweep_candidates_need_min_blocks():
    step = schedules.get_step(7)
    base = step.default_config(256, 256, 256)
    space = {"block_m": (32, 64, 128), "block_n": (64, 128)}
    got = sweep.candidates(step, 256, 256, 256, "sm_90", space, base)
    # 256 x 256 has only 32 blocks of 32 x 64: none reaches MIN_BLOCKS.
    assert sweep.MIN_BLOCKS > (256 // 32) * (256 // 64)
    assert got == []


def test_sweep_dry_run_lists_candidates():
    proc = subprocess.run([sys.executable, "-m", "steps.sweep", "--step", "10", "--sizes", "512", "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    m = re.fullmatch(r"512x512x512: (\d+) valid stage-1 \(tile\) candidates", lines[0])
    assert m, lines[:2]
    step = schedules.get_step(10)
    expected = sweep.candidates(step, 512, 512, 512, "sm_90", sweep.STAGES[0][1], step.default_config(512, 512, 512))
    assert int(m[1]) == len(expected) == len(lines) - 1 > 0
    listed = [TunedConfig.from_dict({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", ln)}) for ln in lines[1:]]
    assert listed == expected


def _main(argv, capsys) -> tuple[int, str, str]:
    rc = sweep.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("step, words", [("2", ("steps 1-3", "--step 4")), ("99", ("unknown step",)),
                                         ("0", ("unknown step",))])
def test_sweep_rejects_steps(capsys, step, words):
    rc, out, err = _main(["--step", step, "--sizes", "512", "--dry-run"], capsys)
    assert rc == 2
    assert out == ""
    one_line_error(err, "steps.sweep", *words)


def test_sweep_without_a_gpu_needs_dry_run(capsys, monkeypatch):
    monkeypatch.setattr(harness, "gpu_present", lambda: False)
    monkeypatch.setattr(harness, "gpu_arch", lambda: None)
    rc, out, err = _main(["--step", "10", "--sizes", "512"], capsys)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "GPU" in lines[0] and "--dry-run" in lines[0], err


@pytest.mark.parametrize("raster, group", [(8, 4), (3, 1), (2, 2)])
def test_raster_group_never_launches_idle_blocks(raster, group):
    """256 / 64 = 4 block columns: a group of 8 shrinks to 4, one of 3 to 1 (plain order)."""
    cfg = WarpTileConfig(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=16, stages=2,
                         pad_a=4, warp_m=4, raster=raster)
    script = schedules.get_step(9).schedule(N, N, N, cfg).mod.script()
    blocks = (N // 32) * (N // 64)
    if group == 1:
        assert 'thread="blockIdx.y"' in script
    else:
        assert re.search(rf'T\.thread_binding\({blocks}, thread="blockIdx\.x"\)', script), script[:800]
        assert 'thread="blockIdx.y"' not in script
