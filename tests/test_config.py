"""Config validation: every unbuildable size or tile is a one-line ConfigError, before any IR."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import schedules
from schedules import ConfigError
from schedules import shape_rule, step10_tuned, step11_split_k
from schedules.config import (
    MAX_SHARED_BYTES,
    MAX_STATIC_SHARED_BYTES,
    AsyncCopyConfig,
    ConflictFreeConfig,
    CooperativeFetchConfig,
    GridConfig,
    MatvecConfig,
    RegisterTileConfig,
    SharedTileConfig,
    SplitKConfig,
    TensorCoreConfig,
    TensorCorePipelineConfig,
    TF32x3Config,
    TunedConfig,
    WarpTileConfig,
)

from .checks import config_error

STEPS = schedules.STEPS
# The steps that schedule the base matmul; the Hopper rungs' kernels (steps 15 on) are written,
# and tests/test_hopper.py checks their configs.
SCHEDULED = [s for s in STEPS if s.arch is None]
CONFIG_CLASSES = (
    GridConfig, RegisterTileConfig, SharedTileConfig, CooperativeFetchConfig,
    AsyncCopyConfig, ConflictFreeConfig, WarpTileConfig, TunedConfig, SplitKConfig,
    TensorCoreConfig, TensorCorePipelineConfig, TF32x3Config, MatvecConfig,
)


def _step_id(step) -> str:
    return f"step{step.number}"


def test_config_error_is_the_public_one():
    assert schedules.ConfigError is schedules.config.ConfigError
    assert issubclass(ConfigError, ValueError)


# --- problem sizes ----------------------------------------------------------------------

BAD_SIZES = [0, -1, -256, 1.5, 256.0, "256", None, True]


@pytest.mark.parametrize("bad", BAD_SIZES, ids=repr)
@pytest.mark.parametrize("which", ("M", "N", "K"))
@pytest.mark.parametrize("step", STEPS, ids=_step_id)
def test_bad_sizes_rejected_by_schedule(step, which, bad):
    sizes = {"M": 256, "N": 256, "K": 256, which: bad}
    config_error(lambda: step.schedule(sizes["M"], sizes["N"], sizes["K"]), which, "positive integer")
    cfg = step.default_config(256, 256, 256)
    config_error(lambda: step.schedule(sizes["M"], sizes["N"], sizes["K"], cfg), which, "positive integer")
    config_error(lambda: cfg.validate(sizes["M"], sizes["N"], sizes["K"]), which, "positive integer")


@pytest.mark.parametrize("shape, matrix", [
    ((46341, 46341, 46341), "A"),   # 46341^2 > 2^31: TVM stopped with an int32 literal check
    ((1, 46341, 46341), "B"),       # K*N: TVM built this one, with indices that overflow
    ((46341, 46341, 1), "C"),
    ((2**31, 1, 1), "A"),           # exactly 2^31 elements is one too many
], ids=str)
def test_matrices_of_2_to_the_31_elements_are_rejected(shape, matrix):
    msg = config_error(lambda: schedules.config.check_sizes(*shape), f"{matrix} would have", "2^31", "int32")
    assert "M*K, K*N and M*N" in msg
    config_error(lambda: STEPS[-1].default_config(*shape).validate(*shape), "2^31")
    config_error(lambda: schedules.build(4, *shape), "2^31")


@pytest.mark.parametrize("shape", [(46340, 46340, 46340), (2**31 - 1, 1, 1), (1, 1, 2**31 - 1)], ids=str)
def test_matrices_below_2_to_the_31_elements_pass_the_size_check(shape):
    schedules.config.check_sizes(*shape)


@pytest.mark.parametrize("bad", (0, -2048, 2048.0), ids=repr)
def test_bad_sizes_rejected_by_build(bad):
    config_error(lambda: schedules.build(6, 2048, 2048, bad), "K", "positive integer")


@pytest.mark.parametrize(
    "cfg, field",
    [
        (GridConfig(block_m=0), "block_m"),
        (GridConfig(block_n=-16), "block_n"),
        (GridConfig(block_m=16.0), "block_m"),
        (RegisterTileConfig(thread_m=True), "thread_m"),
        (SharedTileConfig(block_k="16"), "block_k"),
        (CooperativeFetchConfig(vector=0), "vector"),
    ],
    ids=repr,
)
def test_non_positive_or_non_int_fields(cfg, field):
    config_error(lambda: cfg.validate(2048, 2048, 2048), field, "positive integer")


# --- tiles that do not divide -----------------------------------------------------------


def test_block_tiles_need_not_divide_the_problem():
    """Any M, N, K: Step.schedule pads to whole tiles (schedules/transforms/padding.py, tests/test_shapes.py)."""
    for cls in CONFIG_CLASSES:
        cls().validate(1000, 1500, 700)
        cls().validate(1, 1, 1)
    CooperativeFetchConfig(vector=4).validate(2047, 2047, 2047)  # the vector narrows, no error


def test_thread_tile_must_divide_block_tile():
    cfg = RegisterTileConfig(block_m=128, block_n=128, thread_m=3, thread_n=8)
    config_error(lambda: cfg.validate(2048, 2048, 2048), "thread_m", "divide", "block_m")


# --- hardware limits --------------------------------------------------------------------


def test_too_many_threads_per_block():
    cfg = RegisterTileConfig(block_m=256, block_n=256, thread_m=1, thread_n=2)
    assert cfg.threads == 256 * 128
    config_error(lambda: cfg.validate(2048, 2048, 2048), "threads per block", "1024")
    config_error(lambda: schedules.get_step(2).schedule(2048, 2048, 2048, cfg), "threads per block")
    config_error(lambda: schedules.get_step(1).schedule(2048, 2048, 2048, GridConfig(64, 64)), "threads per block")


def test_exactly_1024_threads_is_allowed():
    GridConfig(block_m=32, block_n=32).validate(2048, 2048, 2048)


def _cuda(number: int, n: int, cfg, arch: str = "sm_90") -> str:
    return schedules.cuda_source(schedules.build(number, n, n, n, arch=arch, config=cfg))


def _is_dynamic(src: str) -> bool:
    """TVM declares dynamic shared memory as `extern __shared__ ... buf_dyn_shmem[]`."""
    return re.search(r"extern __shared__ .*\bbuf_dyn_shmem(?:_ptr)?\[\];", src) is not None


def _static_shared(src: str) -> list[str]:
    return re.findall(r"^\s*__shared__ .*;", src, re.M)


def test_shared_memory_limits_per_arch():
    assert MAX_STATIC_SHARED_BYTES == 48 * 1024
    assert MAX_SHARED_BYTES == {
        "sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
        "sm_90a": 227 * 1024,
    }
    assert set(MAX_SHARED_BYTES) == set(schedules.VALID_ARCHS)


def test_too_much_shared_memory():
    # 256 x 256 blocks of 8 x 8 micro-tiles (1024 threads), block_k = 64: 128 KB per slice,
    # 256 KB for the (256 + 256) x 128 tile: over sm_90's 227 KB opt-in limit.
    cfg = CooperativeFetchConfig(block_m=256, block_n=256, thread_m=8, thread_n=8, block_k=128)
    assert cfg.shared_bytes == (256 + 256) * 128 * 4 == 256 * 1024 > MAX_SHARED_BYTES["sm_90"]
    config_error(lambda: cfg.validate(2048, 2048, 2048), "shared memory", str(cfg.shared_bytes), "227 KB", "sm_90")
    for number in (4, 5, 6):
        config_error(lambda: schedules.get_step(number).schedule(2048, 2048, 2048, cfg), "shared memory")
        config_error(lambda: schedules.build(number, 2048, 2048, 2048, config=cfg), "shared memory", "227 KB")
    single = SharedTileConfig(block_m=256, block_n=256, thread_m=8, thread_n=8, block_k=128)  # step 3
    config_error(lambda: single.validate(2048, 2048, 2048), "shared memory", "262144")
    config_error(lambda: schedules.get_step(3).schedule(2048, 2048, 2048, single), "shared memory")
    # Stages multiply it: 4 x 64 KB is over too, 3 x 64 KB = 192 KB is not.
    config_error(lambda: AsyncCopyConfig(block_k=64, stages=4).validate(2048, 2048, 2048), "262144", "227 KB")
    AsyncCopyConfig(block_k=64, stages=3).validate(2048, 2048, 2048)


def test_exactly_227kb_of_shared_memory_is_allowed_and_one_more_row_is_not():
    # (128 + 128) x 227 x 4 = 232448 bytes = 227 KB exactly; block_k 228 adds 1 KB.
    exact = SharedTileConfig(block_k=227)
    assert exact.shared_bytes == MAX_SHARED_BYTES["sm_90"]
    exact.validate(1024, 1024, 1024)
    exact.check_shared_memory("sm_90")
    config_error(lambda: exact.check_shared_memory("sm_80"), "163 KB", "sm_80")
    over = SharedTileConfig(block_k=228)
    config_error(lambda: over.validate(1024, 1024, 1024), "shared memory", "233472", "227 KB")
    # Step 8's padding counts: 4 stages x (128 x (64 + 4) + 64 x 128) floats = 270336 bytes.
    padded = ConflictFreeConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=64, stages=4)
    assert padded.shared_bytes == 4 * (128 * 68 + 64 * 128) * 4
    config_error(lambda: padded.validate(2048, 2048, 2048), "shared memory", str(padded.shared_bytes))
    # Without the pad it is 256 KB, still over; 3 stages unpadded is 192 KB, fine.
    dataclasses.replace(padded, stages=3, pad_a=0).validate(2048, 2048, 2048)


def test_over_48kb_goes_to_dynamic_shared_memory():
    """Above the 48 KB static limit a config is valid: its tiles live in `shared.dyn`."""
    # (128 + 128) x 49 x 4 = 50176 bytes: just over 48 KB, with a block_k no K divides.
    just_over = SharedTileConfig(block_k=49)
    assert just_over.shared_bytes == 50176 and just_over.shared_scope == "shared.dyn"
    just_over.validate(1024, 1024, 49 * 32)
    # Step 4 at 64 KB (128 x 128 x 64): dynamic in the CUDA, no static __shared__ arrays,
    # and the launch passes exactly the config's bytes of dynamic shared memory.
    cfg = CooperativeFetchConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=64)
    assert cfg.shared_bytes == 64 * 1024 and cfg.shared_scope == "shared.dyn"
    cfg.validate(256, 256, 256)
    lib = schedules.build(4, 256, 256, 256, config=cfg)
    src = schedules.cuda_source(lib)
    assert _is_dynamic(src), "no extern __shared__ dynamic shared memory"
    assert _static_shared(src) == []
    host = lib.mod.inspect_source()  # the launch's dynamic shared memory size is a constant there
    assert re.search(rf"store i64 {cfg.shared_bytes},", host), "dynamic shared bytes not in the launch"


@pytest.mark.parametrize("cls", (SharedTileConfig, CooperativeFetchConfig), ids=lambda c: c.__name__)
def test_exactly_48kb_of_shared_memory_is_static(cls):
    # 128 x 128 blocks of 8 x 8 micro-tiles (256 threads), block_k = 48: (128 + 128) x 48 x 4.
    # Each 128 x 48 tile is 6144 floats = 6 rounds of 256 threads x float4, so it all divides.
    cfg = cls(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=48)
    assert cfg.shared_bytes == 48 * 1024
    assert cfg.shared_scope == "shared"
    M = N = 1024
    K = 48 * 32
    cfg.validate(M, N, K)
    step = next(s for s in STEPS if s.Config is cls)
    step.schedule(M, N, K, cfg)  # raises nothing
    if cls is CooperativeFetchConfig:
        src = _cuda(step.number, 256, cfg)
        assert not _is_dynamic(src)
        assert len(_static_shared(src)) == 2, _static_shared(src)


def test_shared_memory_limit_is_the_build_archs():
    """sm_86 opts in to 99 KB per block, sm_80 to 163 KB, sm_90 to 227 KB: build checks its own."""
    # Step 7, 3 stages x (128 + 128) x 32 x 4 = 96 KB: fits everywhere.
    fits = AsyncCopyConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=32, stages=3)
    assert fits.shared_bytes == 96 * 1024
    # 4 stages: 128 KB, between sm_86's 99 KB and sm_90's 227 KB.
    big = AsyncCopyConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=32, stages=4)
    assert MAX_SHARED_BYTES["sm_86"] < big.shared_bytes == 128 * 1024 < MAX_SHARED_BYTES["sm_80"]
    big.validate(256, 256, 256)  # validate checks the largest (sm_90) limit only
    for arch in ("sm_86", "sm_89"):
        msg = config_error(lambda: schedules.build(7, 256, 256, 256, arch=arch, config=big),
                           "shared memory", str(big.shared_bytes), "99 KB", arch)
        assert "sm_90" not in msg
        config_error(lambda: big.check_shared_memory(arch), arch)
    big.check_shared_memory("sm_80")
    big.check_shared_memory("sm_90")
    src = _cuda(7, 256, big, arch="sm_80")
    assert _is_dynamic(src) and _static_shared(src) == []
    fits.check_shared_memory("sm_86")


# --- cooperative fetch ------------------------------------------------------------------


@pytest.mark.parametrize("vector", (3, 8, 16))
def test_vector_width(vector):
    cfg = CooperativeFetchConfig(block_k=16, vector=vector)
    config_error(lambda: cfg.validate(2048, 2048, 2048), "vector", "1, 2 or 4")
    config_error(lambda: schedules.get_step(4).schedule(2048, 2048, 2048, cfg), "vector")


@pytest.mark.parametrize("vector", (1, 2, 4))
def test_valid_vector_widths(vector):
    CooperativeFetchConfig(vector=vector).validate(2048, 2048, 2048)


def test_vector_must_divide_block_k():
    cfg = CooperativeFetchConfig(block_k=2, vector=4)
    config_error(lambda: cfg.validate(2048, 2048, 2048), "vector", "block_k")


def test_cooperative_fetch_must_split_evenly_for_A():
    # 256 threads x float4 = 1024 floats per round; the A tile is 128 x 4 = 512 floats.
    cfg = CooperativeFetchConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=4, vector=4)
    config_error(lambda: cfg.validate(2048, 2048, 2048), "A tile", "evenly")


def test_cooperative_fetch_must_split_evenly_for_B():
    # 128 threads x float4 = 512 floats per round; A is 128 x 4 = 512 (fine), B is 4 x 64 = 256.
    cfg = CooperativeFetchConfig(block_m=128, block_n=64, thread_m=8, thread_n=8, block_k=4, vector=4)
    config_error(lambda: cfg.validate(2048, 2048, 2048), "B tile", "evenly")


# --- pipelining (step 6: no stages, the registers are the second buffer) -------------------


@pytest.mark.parametrize("slices", (1, 2, 3))
def test_step6_needs_no_minimum_number_of_k_slices(slices):
    """The register prefetch has no stage count to fill: one block_k slice is a valid K."""
    step5, step6 = schedules.get_step(5), schedules.get_step(6)
    cfg = step6.default_config(256, 256, 16 * slices)
    assert type(cfg) is CooperativeFetchConfig and cfg.block_k == 16
    assert not hasattr(cfg, "stages")
    cfg.validate(256, 256, 16 * slices)
    script = step6.schedule(256, 256, 16 * slices).mod.script()
    assert "software_pipeline_stage" in script
    assert "software_pipeline_stage" not in step5.schedule(256, 256, 16 * slices).mod.script()
    # And it lowers: the pipeline's prologue/epilogue cover a k_outer of one slice too.
    src = schedules.cuda_source(schedules.build(6, 256, 256, 16 * slices))
    assert 'extern "C" __global__' in src and "A_local" in src and "B_local" in src


# --- registry look-ups ------------------------------------------------------------------


@pytest.mark.parametrize("number", (99, 0, STEPS[-1].number + 1, -1, "3"), ids=repr)
def test_unknown_step(number):
    config_error(lambda: schedules.get_step(number), "unknown step")
    config_error(lambda: schedules.build(number, 256, 256, 256), "unknown step")


@pytest.mark.parametrize("arch", ("sm_75", "sm_100", "", "90"), ids=repr)
def test_unknown_arch(arch):
    config_error(lambda: schedules.target(arch), "unknown arch", "sm_90")
    config_error(lambda: schedules.build(1, 256, 256, 256, arch=arch), "unknown arch")


@pytest.mark.parametrize("arch", schedules.VALID_ARCHS)
def test_valid_arch_targets(arch):
    tgt = schedules.target(arch)
    assert tgt.kind.name == "cuda"
    assert tgt.attrs["arch"] == arch


# --- wrong config class -----------------------------------------------------------------


@pytest.mark.parametrize(
    "number, cfg",
    [
        (2, GridConfig()),
        (3, RegisterTileConfig()),
        (4, SharedTileConfig()),
        (5, SharedTileConfig()),
        (6, SharedTileConfig()),
        (6, RegisterTileConfig()),
        # Subclasses of the step's class are rejected too: they mean more (thread_m, ...).
        (1, RegisterTileConfig()),
        (1, CooperativeFetchConfig()),
        (2, SharedTileConfig()),
        (3, CooperativeFetchConfig()),
        (7, CooperativeFetchConfig()),
        (8, AsyncCopyConfig()),
        (9, ConflictFreeConfig()),
        (10, WarpTileConfig()),
        (7, TunedConfig()),
        (9, TunedConfig()),
        (1, {"block_m": 16, "block_n": 16}),
        (6, CooperativeFetchConfig().as_dict()),
        (10, TunedConfig().as_dict()),
        # The tensor-core steps: CUDA-core configs, and each other's, are rejected both ways.
        (12, SplitKConfig()),
        (12, TensorCorePipelineConfig()),
        (13, TensorCoreConfig()),
        (13, TF32x3Config()),
        (14, TensorCorePipelineConfig()),
        (11, TensorCoreConfig()),
        (14, TF32x3Config().as_dict()),
    ],
    ids=lambda v: v if isinstance(v, int) else type(v).__name__,
)
def test_wrong_config_class(number, cfg):
    step = schedules.get_step(number)
    msg = config_error(lambda: step.schedule(2048, 2048, 2048, cfg), step.Config.__name__, type(cfg).__name__)
    assert msg == f"step {number} takes a {step.Config.__name__}, got {type(cfg).__name__}"
    config_error(lambda: schedules.build(number, 2048, 2048, 2048, config=cfg), step.Config.__name__)


def _launch_bounds(number: int, cfg, n: int = 2048) -> int:
    src = schedules.cuda_source(schedules.build(number, n, n, n, config=cfg))
    bounds = {int(b) for b in re.findall(r"__launch_bounds__\((\d+)\)", src)}
    assert len(bounds) == 1, bounds
    return bounds.pop()


def _step_pair_id(pair) -> str:
    return f"step{pair[0].number}-gets-step{pair[1].number}"


@pytest.mark.parametrize(
    "pair", [(s, o) for s in STEPS for o in STEPS if s is not o], ids=_step_pair_id
)
def test_steps_take_only_their_own_config_class(pair):
    """A config of another step's class is rejected unless it is exactly this step's class.

    Later configs subclass earlier ones, but step N takes only ``type(cfg) is step.Config``,
    so e.g. step 1 does not silently build a RegisterTileConfig as a 128 x 128 thread block.
    """
    step, other = pair
    cfg = other.default_config(2048, 2048, 2048)
    assert type(cfg) is other.Config
    if other.Config is step.Config:
        step.schedule(2048, 2048, 2048, cfg)  # steps 4-6 share CooperativeFetchConfig
        return
    msg = config_error(lambda: step.schedule(2048, 2048, 2048, cfg))
    assert msg == f"step {step.number} takes a {step.Config.__name__}, got {other.Config.__name__}"


# A non-default config of each class, with a thread count its step's 2048^3 default lacks:
# 128 threads where the default has 256 (steps 1-9, 13), 256 where it has 128 (steps 10, 12)
# or 512 (step 14).
OWN_CONFIGS = {
    GridConfig: GridConfig(block_m=4, block_n=32),
    RegisterTileConfig: RegisterTileConfig(block_m=64, block_n=128, thread_m=8, thread_n=8),
    SharedTileConfig: SharedTileConfig(block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=8),
    CooperativeFetchConfig: CooperativeFetchConfig(
        block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=8, vector=4
    ),
    AsyncCopyConfig: AsyncCopyConfig(block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=8, stages=2),
    ConflictFreeConfig: ConflictFreeConfig(
        block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=8, stages=3, pad_a=8
    ),
    WarpTileConfig: WarpTileConfig(
        block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=8, stages=2, pad_a=0, warp_m=2, raster=4
    ),
    TunedConfig: TunedConfig(
        block_m=128, block_n=64, thread_m=8, thread_n=4, block_k=16, stages=3, pad_a=4, warp_m=4,
        raster=8, unroll_k=0,
    ),
    # split_k 1: one kernel, so one launch bound to compare (split-K's: tests/test_split_k.py).
    SplitKConfig: SplitKConfig(
        block_m=128, block_n=64, thread_m=8, thread_n=4, block_k=16, stages=3, pad_a=4, warp_m=4,
        raster=8, unroll_k=0, split_k=1,
    ),
    # Tensor cores: threads are warps x 32, so the count follows the warp tiles.
    TensorCoreConfig: TensorCoreConfig(block_m=128, block_n=128, block_k=16, warp_m=64, warp_n=32),  # 8 warps
    TensorCorePipelineConfig: TensorCorePipelineConfig(
        block_m=128, block_n=128, block_k=32, warp_m=64, warp_n=64, stages=2, pad_a=8, pad_b=4, raster=2,
    ),  # 4 warps (the default from 2048 up has 8)
    TF32x3Config: TF32x3Config(
        block_m=128, block_n=128, block_k=16, warp_m=32, warp_n=64, stages=2, pad_a=0, pad_b=0, raster=2,
        promote=0,
    ),  # 8 warps (the default from 2048 up has 4)
    MatvecConfig: MatvecConfig(lanes_n=4, lanes_k=32, unroll=4),  # 4 warps (the default has 8)
}


@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_own_config_class_is_accepted_and_honoured(step):
    cfg = OWN_CONFIGS[step.Config]
    assert type(cfg) is step.Config
    cfg.validate(2048, 2048, 2048)
    assert cfg != step.default_config(2048, 2048, 2048)
    assert cfg.threads in (128, 256)
    assert cfg.threads != step.default_config(2048, 2048, 2048).threads
    assert _launch_bounds(step.number, cfg) == cfg.threads


@pytest.mark.parametrize("step", STEPS, ids=_step_id)
def test_subclass_of_own_config_class_is_rejected(step):
    Tuned = dataclasses.make_dataclass("Tuned" + step.Config.__name__, [], bases=(step.Config,), frozen=True)
    cfg = Tuned(**step.default_config(2048, 2048, 2048).as_dict())
    assert isinstance(cfg, step.Config)
    cfg.validate(2048, 2048, 2048)  # a valid config in itself
    msg = config_error(lambda: step.schedule(2048, 2048, 2048, cfg))
    assert msg == f"step {step.number} takes a {step.Config.__name__}, got {Tuned.__name__}"


# --- as_dict / from_dict ----------------------------------------------------------------


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_round_trip_defaults(cls):
    cfg = cls()
    data = cfg.as_dict()
    assert isinstance(data, dict)
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in data.items())
    assert cls.from_dict(data) == cfg
    assert cls.from_dict({}) == cfg


def test_round_trip_non_default():
    cfg = CooperativeFetchConfig(block_m=64, block_n=32, thread_m=4, thread_n=2, block_k=8, vector=2)
    data = cfg.as_dict()
    assert data == {
        "block_m": 64, "block_n": 32, "thread_m": 4, "thread_n": 2,
        "block_k": 8, "vector": 2,
    }
    assert CooperativeFetchConfig.from_dict(data) == cfg
    assert GridConfig(block_m=8, block_n=32).as_dict() == {"block_m": 8, "block_n": 32}
    assert GridConfig.from_dict({"block_n": 8}) == GridConfig(block_m=16, block_n=8)


@pytest.mark.parametrize("step", STEPS, ids=_step_id)
def test_round_trip_step_defaults(step):
    for n in (256, 2048):
        cfg = step.default_config(n, n, n)
        assert step.Config.from_dict(cfg.as_dict()) == cfg


def test_from_dict_rejects_unknown_keys():
    # thread_m is a fixed property of GridConfig, not a field.
    config_error(lambda: GridConfig.from_dict({"block_m": 16, "thread_m": 2}), "unknown", "thread_m")
    msg = config_error(lambda: SharedTileConfig.from_dict(CooperativeFetchConfig().as_dict()), "unknown", "SharedTileConfig")
    assert "vector" in msg and "block_k" not in msg
    config_error(lambda: CooperativeFetchConfig.from_dict({"stages": 2}), "unknown", "stages")
    config_error(lambda: RegisterTileConfig.from_dict({"blockm": 64}), "unknown", "blockm")


# --- defaults ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", (512, 1024, 2048))
@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_default_configs_validate(step, n):
    cfg = step.default_config(n, n, n)
    assert type(cfg) is step.Config
    cfg.validate(n, n, n)
    assert cfg.threads <= 1024
    step.schedule(n, n, n)  # raises nothing with the default config
    if step.tensor_cores:
        # Tensor-core steps always use dynamic shared memory: the operand stages and the C tile
        # staged after the k loop share one buffer (MergeSharedMemoryAllocations merges only
        # shared.dyn), so their footprint is the larger of the two, not the sum.
        assert cfg.shared_scope == "shared.dyn"
        assert cfg.shared_bytes == max(cfg.stages * cfg.operand_bytes, cfg.output_bytes)
        # Their large-size defaults are tuned for sm_90 (227 KB per block): at 2048 step 13
        # takes 204 KB (over sm_80's 163 KB) and step 14 more than sm_86/89's 99 KB. sm_90 fits;
        # a smaller arch is refused by build() with the one-line error, before anything is
        # compiled (--config stages=... fits it).
        cfg.check_shared_memory("sm_90")
        for arch in ("sm_80", "sm_86", "sm_89"):
            if cfg.shared_bytes <= MAX_SHARED_BYTES[arch]:
                cfg.check_shared_memory(arch)
                continue
            assert step.number in (13, 14) and n == 2048
            assert arch != "sm_80" or step.number == 13
            msg = config_error(lambda: schedules.build(step, n, n, n, arch=arch), "shared memory",
                               str(cfg.shared_bytes), f"{MAX_SHARED_BYTES[arch] // 1024} KB", arch)
            assert "sm_90" not in msg
        return
    # Every CUDA-core default fits every arch's shared-memory opt-in (sm_86/89's 99 KB the
    # least), and goes to dynamic shared memory exactly when it is over the 48 KB static limit.
    for arch in schedules.VALID_ARCHS:
        cfg.check_shared_memory(arch)
    assert cfg.shared_bytes <= min(MAX_SHARED_BYTES.values())
    assert cfg.shared_scope == ("shared.dyn" if cfg.shared_bytes > 48 * 1024 else "shared")


# What each step's docstring documents: (block_m, block_n, thread_m, thread_n, block_k, vector).
DEFAULTS = {
    1: {512: (8, 32), 1024: (8, 32), 2048: (8, 32)},
    2: {512: (32, 32, 4, 4), 1024: (64, 64, 4, 4), 2048: (64, 64, 8, 8)},
    3: {512: (32, 32, 4, 4, 16), 1024: (64, 64, 4, 4, 16), 2048: (64, 64, 8, 8, 16)},
    4: {512: (32, 64, 4, 4, 16, 4), 1024: (64, 64, 4, 4, 16, 4), 2048: (64, 64, 4, 4, 16, 4)},
}
# Step 5: 8x8 micro-tiles in 128x128 blocks at 2048; step 6 keeps step 4's tiles everywhere.
DEFAULTS[5] = {**DEFAULTS[4], 2048: (128, 128, 8, 8, 16, 4)}
DEFAULTS[6] = DEFAULTS[4]
# Steps 7-9: the step 7 sweep's tiles, + stages; step 8 adds pad_a and transpose_a (0: A stays
# m-major), step 9 warp_m and raster.
DEFAULTS[7] = {
    512: (32, 64, 4, 4, 16, 4, 4),
    1024: (32, 64, 8, 4, 16, 4, 4),
    2048: (64, 128, 8, 4, 32, 4, 2),
}
DEFAULTS[8] = {n: (*cfg, 4, 0) for n, cfg in DEFAULTS[7].items()}
DEFAULTS[9] = {n: (*cfg, 4, 1) for n, cfg in DEFAULTS[8].items()}
# Tensor cores, as their modules document: (block_m, block_n, block_k, warp_m, warp_n, vector),
# + stages, pad_a, pad_b, raster, fragment_buffers, barriers from step 13, + promote from step 14.
# Step 12: 64 x 64 blocks of four 32 x 32 warps up to 1024^2 outputs, then 128 x 128 of 64 x 64.
DEFAULTS[12] = {512: (64, 64, 32, 32, 32, 4), 1024: (64, 64, 32, 32, 32, 4), 2048: (128, 128, 32, 64, 64, 4)}
# Step 13: 4 stages of 64 x 64 at 512, 64 x 128 at 1024 (pads of 4 (A) and 8 (B) floats, the
# fragments double-buffered); at 2048 one block of 8 warps of 64 x 64 in 128 x 256 per SM, 4
# stages, rasterized 4 wide, fragments double-buffered, one barrier per slice.
DEFAULTS[13] = {
    512: (64, 64, 32, 32, 32, 4, 4, 4, 8, 1, 2, 2),
    1024: (64, 128, 32, 32, 64, 4, 3, 4, 8, 1, 2, 2),
    2048: (128, 256, 32, 64, 64, 4, 4, 4, 8, 4, 2, 1),
}
# Step 14: per-slice promotion everywhere; four 16 x 32 warps in 32 x 64 blocks at 512, four
# 32 x 64 warps in 64 x 128 blocks (rasterized 8 wide) from 1024 up; TVM's two barriers.
DEFAULTS[14] = {
    512: (32, 64, 32, 16, 32, 4, 3, 4, 8, 1, 1, 2, 2),
    1024: (64, 128, 32, 32, 64, 4, 3, 4, 8, 8, 1, 2, 2),
    2048: (64, 128, 32, 32, 64, 4, 3, 4, 8, 8, 1, 2, 2),
}
# Step 24 (lanes_n, lanes_k, unroll): from M = 5, 8 lanes to a 128-byte segment, 32 k lanes, 4 rows.
DEFAULTS[24] = {512: (8, 32, 4), 1024: (8, 32, 4), 2048: (8, 32, 4)}


def _tuned_file_defaults(path=step10_tuned.TUNED_PATH, config_class=TunedConfig) -> dict[int, tuple]:
    """Step 10: whatever the committed sweep wrote to schedules/tuned/step10.json (read here
    with plain json, not with the step's loader), in TunedConfig field order; step 11 the same
    from its own file, where one is committed."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    order = [f.name for f in dataclasses.fields(config_class)]
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    table = {}
    for entry in data["configs"]:
        if entry["M"] == entry["N"] == entry["K"]:
            # A field added after the sweep wrote the file loads at its default: step 11's
            # stage_pads (entries written before it are staged-padding 0) and k_threads (before
            # it every entry was a tiled config, k_threads 1). No other may be missing.
            assert set(entry["config"]) <= set(order), entry
            assert set(order) - set(entry["config"]) <= {"stage_pads", "k_threads"}, entry
            config = {**defaults, **entry["config"]}
            table[entry["M"]] = tuple(config[name] for name in order)
    return table



@pytest.mark.parametrize("n", (512, 1024, 2048))
@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_default_configs_per_size(step, n):
    cfg = step.default_config(n, n, n)
    assert type(cfg) is step.Config
    if step.number == 11:  # an exact entry of its tuned table, else the shape rule's config
        entry = _tuned_file_defaults(step11_split_k.TUNED_PATH, SplitKConfig).get(n)
        assert cfg == (SplitKConfig(**dict(zip(cfg.as_dict(), entry))) if entry else shape_rule.rule_config(n, n, n))
        return
    # Step 10's row is read when the test runs: a sweep may rewrite the file at any time.
    expected = _tuned_file_defaults()[n] if step.number == 10 else DEFAULTS[step.number][n]
    assert tuple(cfg.as_dict().values()) == expected
