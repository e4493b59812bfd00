"""Step 27 (stream-K) without a GPU: the walk's arithmetic, where it streams, and what its CUDA holds.

``StreamK``'s methods are the kernel's own index arithmetic (the kernel calls them on blockIdx.x's
expression); here they run on Python ints, over every cluster, for shapes of every kind.
"""

import dataclasses
import re

import pytest

import schedules
from schedules.config import HOPPER_SMS, ConfigError, WgmmaStreamKConfig
from schedules.step27_stream_k import StreamK, default_config

from steps.measure import nvcc

from .checks import config_error

STEP = schedules.get_step(27)


def _walk(w: StreamK):
    """Every unit of every cluster: {cluster: [(pair, k0, n, g0, owner, shared), ...]}, whole pairs first."""
    units = {}
    for c in range(w.clusters):
        whole = [(c + t * w.clusters, 0, w.KT, t * w.KT, True, False) for t in range(w.waves)]
        units[c] = whole + [w.unit(c, u) for u in range(w.units(c))]
    return units


WALKS = [StreamK(p, c, kt, share) for p, c, kt, share in [
    (256, 66, 64, 1), (1024, 66, 128, 8), (1024, 66, 64, 8), (576, 66, 1, 1), (289, 66, 16, 1), (67, 66, 3, 1),
    (240, 66, 63, 1), (133, 66, 1, 1), (4000, 66, 7, 8), (131, 64, 200, 1)]]


@pytest.mark.parametrize("w", WALKS, ids=str)
def test_every_slice_of_every_pair_is_multiplied_once(w):
    assert w.streams
    seen = {}
    for c, units in _walk(w).items():
        for pair, k0, n, _g0, _owner, _shared in units:
            assert n >= 1 and 0 <= k0 and k0 + n <= w.KT
            for k in range(k0, k0 + n):
                assert (pair, k) not in seen, f"slice {k} of pair {pair}: clusters {seen[(pair, k)]} and {c}"
                seen[(pair, k)] = c
    assert len(seen) == w.pairs * w.KT
    # Equal shares: the clusters' slices differ by at most one.
    per = [sum(u[2] for u in units) for units in _walk(w).values()]
    assert max(per) - min(per) <= 1


@pytest.mark.parametrize("w", WALKS, ids=str)
def test_a_cut_pair_has_one_owner_and_its_partner_is_the_next_cluster(w):
    units = _walk(w)
    for c, mine in units.items():
        # The ring's count runs on across a cluster's units.
        assert [u[3] for u in mine] == [sum(v[2] for v in mine[:i]) for i in range(len(mine))]
        for i, (pair, k0, n, _g0, owner, shared) in enumerate(mine):
            assert owner == (k0 == 0) and shared == (n < w.KT)
            if not owner:
                # Only a range's first unit lacks its pair's first slices; the owner is the cluster
                # before, whose last unit holds them and adds these (slot bid + 2: the next cluster).
                assert i == w.waves and c > 0
                assert units[c - 1][-1][:2] == (pair, 0) and units[c - 1][-1][2] == k0
                assert units[c - 1][-1][5]
            elif shared:
                assert i == len(mine) - 1 and c + 1 < w.clusters
                nxt = units[c + 1][w.waves]
                assert nxt[0] == pair and not nxt[4] and nxt[1] == n and n + nxt[2] == w.KT


def test_ragged_waves_weighs_the_idle_sms_against_the_fix_up():
    from schedules.step27_stream_k import ragged_waves
    assert ragged_waves(144, 64, 3072)  # 3072^3: 3 waves against 2.18 + 0.67
    assert not ragged_waves(256, 64, 4096)  # 4096^3: 4 against 3.88 + 0.5
    assert not ragged_waves(576, 64, 6144)  # 6144^3: 9 against 8.73 + 0.33
    assert ragged_waves(1024, 64, 8192)  # 8192^3: 16 against 15.52 + 0.25
    assert not ragged_waves(144, 64, 512)  # a short K: the fix-up outweighs the wave
    assert not ragged_waves(60, 64, 8192)  # fewer pairs than clusters: nothing to stream


def test_where_it_streams():
    assert not StreamK(256, 64, 64).streams  # 4 waves exactly
    assert not StreamK(60, 66, 64).streams  # fewer pairs than clusters
    assert StreamK(256, 66, 64).streams and StreamK(256, 66, 64).streamed == 124 and StreamK(256, 66, 64).waves == 2
    assert not StreamK(256, 66, 64, 8).streams  # 124 of 256 streamed: more than an eighth
    w = StreamK(1024, 66, 128, 8)
    assert w.streams and (w.waves, w.streamed) == (14, 100)


@pytest.mark.parametrize("shape, streams", [((8192, 8192, 8192), True), ((8192, 8192, 4096), True),
                                            ((3072, 3072, 3072), True),
                                            ((4096, 4096, 4096), False), ((6144, 6144, 6144), False),
                                            ((2048, 2048, 2048), False), ((8192, 8190, 4096), False)])
def test_the_default_streams_on_every_sm_or_is_step_22(shape, streams):
    cfg = default_config(*shape, "bf16")
    # 3072^3: 78 of 144 pairs streamed, more than an eighth, but step 22's whole waves (3 for 2.18
    # pairs' work a cluster) cost more than the fix-up: every pair streamable.
    assert isinstance(cfg, WgmmaStreamKConfig) and cfg.stream_share == (1 if shape == (3072, 3072, 3072) else 8)
    src = schedules.cuda_source(schedules.build(27, *shape, arch="sm_90a", dtype="bf16"))
    if streams:
        assert cfg.ctas == HOPPER_SMS
        assert src != schedules.cuda_source(schedules.build(22, *shape, arch="sm_90a", dtype="bf16"))
    else:
        # Step 22's config (its ctas), so its kernel byte for byte (8190 columns: TMA cannot store
        # C, and step 22's kernel is step 21's).
        step22 = schedules.get_step(22).default_config(*shape, "bf16")
        assert cfg.ctas == step22.ctas
        assert src == schedules.cuda_source(schedules.build(22, *shape, arch="sm_90a", dtype="bf16"))
    assert ("stream_k_wait" in src) == streams


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_cuda_holds_the_fix_up(dtype):
    src = schedules.cuda_source(schedules.build(27, 8192, 8192, 4096, arch="sm_90a", dtype=dtype))
    # One kernel after the copies: clusters, multicast A, TMA stores; the workspace and flags are
    # the module's own (132 blocks x 2 consumers slots of 128 x 128 fp32).
    assert len(re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\) \w+\([^)]*\) \{', src)) == 1
    assert ".multicast::cluster" in src and "cp.async.bulk.tensor.2d.global.shared::cta" in src
    assert "__device__ float stream_k_partials_264x128[4325376];" in src
    assert "__device__ unsigned int stream_k_flags_264x128[264];" in src
    # Release after the warpgroup met; acquire before it meets again; through L2 both ways.
    assert "red.release.gpu.global.add.u32" in src and "ld.acquire.gpu.global.u32" in src
    assert "__stcg(" in src and "__ldcg(" in src
    body = src[src.index("main_kernel(const __grid_constant__"):]
    assert body.count("stream_k_put_264x128(") == 128 and body.count("stream_k_get_264x128(") == 128
    # The owner's partner is the next cluster's same block: slot (bid + 2) * 2 + wg.
    assert re.search(r"stream_k_wait_264x128\(\(\(\(\(\(int\)blockIdx\.x\) \* 2\) \+ \(\(\(int\)threadIdx\.x\) >> 7\)\) \+ 3\)\)", body)


def test_stream_share_is_checked():
    msg = config_error(lambda: schedules.build(27, 8192, 8192, 4096, arch="sm_90a",
                                                config=WgmmaStreamKConfig(stream_share=0)), "stream_share")
    assert "1 to 64" in msg
    with pytest.raises(ConfigError):
        WgmmaStreamKConfig(stream_share=True).validate(256, 256, 256)
    assert dataclasses.replace(WgmmaStreamKConfig(), stream_share=1).as_dict()["stream_share"] == 1


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_ptxas_no_spills_no_stack_frame_where_it_streams(dtype):
    """The fix-up's 128 scalar puts and gets a thread keep the accumulator in registers."""
    report = nvcc.compile_report(schedules.cuda_source(schedules.build(27, 8192, 8192, 4096, arch="sm_90a", dtype=dtype)),
                                 "sm_90a")
    assert report.ok, report.log[-2000:]
    assert report.spills == 0 and report.stack_bytes == 0 and report.registers <= 170, report.log[-2000:]


def test_the_sweep_varies_the_streamed_share():
    from steps.commands import sweep

    base = default_config(8192, 8192, 4096, "bf16")
    details = sweep.candidates(STEP, 8192, 8192, 4096, "sm_90", sweep.HOPPER_STAGES[2][1], base)
    assert {c.stream_share for c in details} == {1, 2, 4, 8, 16}
    # Step 22's config has no such field: its space is unchanged.
    step22 = schedules.get_step(22)
    assert all(not hasattr(c, "stream_share") for c in sweep.candidates(
        step22, 8192, 8192, 4096, "sm_90", sweep.HOPPER_STAGES[2][1], step22.default_config(8192, 8192, 4096)))
