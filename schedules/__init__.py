"""The ladder of TensorIR schedules for fp32 matmul: the registry everything else imports.

    import schedules
    for step in schedules.STEPS:                      # ordered, step 1 first
        cfg = step.default_config(1024, 1024, 1024)   # a step.Config dataclass
        sch = step.schedule(1024, 1024, 1024, cfg)    # a tvm.s_tir.Schedule
    lib = schedules.build(6, 1024, 1024, 1024)        # compiled; lib["main"](A, B, C)

Pure IR: nothing here touches a GPU or the file system. ``build`` compiles to CUDA source,
which TVM turns into machine code through NVRTC only when the module is loaded on a GPU;
importing this package points that compile at the CUDA wheels' headers (schedules/lowering/nvrtc.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import tvm
from tvm import s_tir
from tvm.target import Target

from . import dispatch
from .config import DTYPES, ConfigError, check_dtype, check_sizes
from .dispatch import Choice
from .lowering import fp32_fallback, long_k, nvrtc, one_barrier, pipelines
from .matmul import matmul, matmul_epilogue
from .transforms import epilogue as epilogue_
from .transforms import padding, wgmma
from .transforms.cuda_core import hoist_init
from .transforms.epilogue import Epilogue

# Before anything is built or loaded: TVM's NVRTC compile needs headers, and a machine with a
# driver but no CUDA toolkit has them only in the wheels; and fp32 keeps its subnormals, which
# TVM's --use_fast_math would flush (schedules/lowering/nvrtc.py says why).
nvrtc.use_wheel_headers()
nvrtc.keep_subnormals()

__all__ = ["STEPS", "Step", "ConfigError", "get_step", "build", "target", "VALID_ARCHS", "fastest", "Choice"]

VALID_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
# Steps 15 on use Hopper's own instructions (wgmma, setmaxnreg: sm_90a). A Hopper GPU reports
# sm_90; for either name their kernels are built for sm_90a, and for any other arch not at all.
HOPPER_ARCHS = ("sm_90", "sm_90a")


@dataclass(frozen=True)
class Step:
    """One rung of the ladder: a schedule idea, its config dataclass and its pass configs."""

    number: int
    name: str
    idea: str
    Config: type
    pass_config: dict
    module: ModuleType
    _default_config: Callable
    # "fp32" (checked against 1e-5, compared with cuBLAS strict fp32) or "tf32" (reduced
    # precision: its own tolerance, compared with cuBLAS TF32).
    precision: str = "fp32"
    tensor_cores: bool = False
    # The arch the step's kernels need (sm_90a for the Hopper rungs), or None: any in VALID_ARCHS.
    arch: str | None = None
    # The input dtypes the step builds for (config.DTYPES' names): fp32 for every step; fp16 and
    # bf16 where the rung's idea has a 16-bit form (the module's DTYPES).
    dtypes: tuple = ("fp32",)

    @property
    def doc(self) -> str:
        return self.module.__doc__ or ""

    def default_config(self, M: int, N: int, K: int, dtype: str = "fp32"):
        """The step's tuned configuration for this problem size (and input dtype)."""
        if dtype == "fp32":
            return self._default_config(M, N, K)
        self.check_dtype(dtype)
        return self._default_config(M, N, K, dtype)

    def check_dtype(self, dtype: str) -> str:
        """`dtype` if the step builds for it; else ConfigError, one line, naming the steps that do."""
        check_dtype(dtype)
        if dtype not in self.dtypes:
            having = [s.number for s in STEPS if dtype in s.dtypes]
            raise ConfigError(f"step {self.number} has no {dtype} form; steps with one: "
                              f"{', '.join(map(str, having)) or 'none'}")
        return dtype

    def name_for(self, dtype: str = "fp32") -> str:
        """The step's name in a table of `dtype` inputs: its own for fp32, else the module's
        NAME_16BIT where the 16-bit form differs in what it names (step 18), or the name with
        its precision replaced by the dtype ("wgmma (TF32)" -> "wgmma (bf16)")."""
        if dtype == "fp32":
            return self.name
        return getattr(self.module, "NAME_16BIT", self.name).replace("TF32", self.check_dtype(dtype))

    def precision_of(self, dtype: str = "fp32") -> str:
        """What the step computes for `dtype` inputs: its own precision for fp32 inputs (fp32 or
        tf32), the dtype itself (fp16, bf16) for 16-bit inputs."""
        return self.precision if dtype == "fp32" else self.check_dtype(dtype)

    def applies_to(self, M: int, N: int, K: int) -> bool:
        """Whether the step is meant for this shape: every step builds for any shape, but a rung of
        one kind of shape (step 24, M <= 16 or N <= 2) says so with its module's ``applies``; the shape
        benchmark times it only there and the dispatch rule picks it only there."""
        applies = getattr(self.module, "applies", None)
        return applies is None or applies(M, N, K)

    def runs_on(self, arch: str) -> bool:
        """Whether the step can be built for (and run on) `arch`."""
        return self.arch is None or arch in HOPPER_ARCHS

    def build_arch(self, arch: str) -> str:
        """The arch its kernels are built for when the ladder targets `arch` (sm_90a for the
        Hopper rungs on sm_90); ConfigError, one line, where the step cannot run."""
        if not self.runs_on(arch):
            raise ConfigError(f"step {self.number} needs a Hopper GPU ({self.arch}: wgmma, TMA); "
                              f"it cannot be built for {arch}")
        return self.arch or arch

    @property
    def schedules_a_block(self) -> bool:
        """Whether the step is a schedule of the base matmul's TensorIR block (steps 1-13), not
        a computation of its own (14's split operands) or a kernel written out (15-22)."""
        return getattr(self.module, "kernel", None) is None and getattr(self.module, "computation", None) is None

    def builds_in_model(self, M: int, N: int, K: int) -> bool:
        """Whether the step's kernel at M x N x K builds inside a model: one TIR pipeline lowers
        all of a model's functions, so a kernel that needs a lowering pass of the ladder's own
        (``device_passes``: step 14's fp32 fallback, step 11's long-K promotion) cannot."""
        try:
            return not device_passes(self, self.default_config(M, N, K), K)
        except ConfigError:
            return False

    def schedule_block(self, sch: s_tir.Schedule, block, pads, staged, cfg, N: int):
        """The step's schedule of compute block `block` in `sch` (its padding `pads` already
        written as blocks, padding.Padding), then the pads folded into the copies: what
        ``schedule`` does once it has the blocks (the dlight rule calls it on a model's
        function, schedules/integration/ladder_rule.py). Returns the step's Tiles."""
        tiles = self.module.apply(sch, cfg, block)
        hoist_init(sch, tiles)
        pads = padding.stage_padding(sch, pads, staged, N)
        padding.inline_padding(sch, pads, tiles.block, tiles.thread_j)
        return tiles

    def schedule(self, M: int, N: int, K: int, config=None, epilogue=None, fused: bool = True,
                 dtype: str = "fp32") -> s_tir.Schedule:
        """Schedule the base matmul for M x N x K; raises ConfigError before touching IR.

        `dtype`: the inputs' dtype (fp32, or fp16 / bf16 where the step has a 16-bit form: fp32
        accumulation, C stored in the input dtype).

        `epilogue` (an epilogue.Epilogue): the kernel computes D = act(alpha * A @ B + bias +
        beta * C_in) instead, folded into the step's store (schedules/transforms/epilogue.py), or with
        `fused` False as a kernel of its own after the product (what fusing is measured against)."""
        check_sizes(M, N, K)
        self.check_dtype(dtype)
        kernel = getattr(self.module, "kernel", None)
        if epilogue is not None and not (self.schedules_a_block or getattr(self.module, "EPILOGUE", False)):
            raise ConfigError(f"step {self.number} has no fused epilogue: it is written for steps that schedule "
                              f"the base matmul (1-13) and the Hopper rungs {', '.join(map(str, EPILOGUE_RUNGS))}")
        if epilogue is not None and dtype != "fp32" and kernel is None:
            sixteen = [n for n in EPILOGUE_RUNGS if dtype in get_step(n).dtypes]
            raise ConfigError(f"step {self.number}'s fused epilogue is written for fp32 inputs only; in {dtype}, "
                              f"the Hopper rungs {', '.join(map(str, sixteen))} have one")
        cfg = self.default_config(M, N, K, dtype) if config is None else config
        # Exact type: later steps' configs subclass earlier ones but mean more (e.g. thread_m).
        if type(cfg) is not self.Config:
            raise ConfigError(f"step {self.number} takes a {self.Config.__name__}, got {type(cfg).__name__}")
        cfg.validate(M, N, K)
        if kernel is not None:
            # The Hopper rungs: a GEMM kernel written as sblocks (schedules/transforms/wgmma.py says why),
            # after the copies its operands need (B transposed, rows padded for TMA), which are
            # plain blocks scheduled here.
            if epilogue is not None:  # D = the epilogue, in the consumers' store or as a kernel after (wgmma.prim_func)
                sch = s_tir.Schedule(kernel(M, N, K, cfg, dtype, epilogue, fused))
            else:
                sch = s_tir.Schedule(kernel(M, N, K, cfg) if dtype == "fp32" else kernel(M, N, K, cfg, dtype))
            # (a rung with copy kernels of its own schedules them itself: step 28's scales and split)
            getattr(self.module, "schedule_copies", wgmma.schedule_copies)(sch)
            return sch
        # Any shape (schedules/transforms/padding.py): narrow `vector` where N or K breaks its alignment,
        # pad to whole tiles, let the step schedule the padded block, then inline the padding.
        # Shapes the tiles divide skip both: the same IR as before shape support. A config
        # that stages its misaligned operands (step 11's stage_pads) keeps its vector instead:
        # their pad blocks become copy kernels and the matmul reads aligned buffers.
        staged = padding.staged_operands(cfg, M, N, K)
        cfg = padding.effective_config(cfg, M, N, K)
        computation = getattr(self.module, "computation", None)
        if computation is None:
            sch = s_tir.Schedule(matmul(M, N, K, DTYPES[dtype]) if epilogue is None
                                 else matmul_epilogue(M, N, K, epilogue))
            block = sch.get_sblock("C")
            pads = padding.pad_to_tiles(sch, block, cfg, M, N, K)
        else:
            # The same product computed another way (step 14: over split operands), which
            # brings its own pad blocks: pad_einsum handles a single product only.
            sch = s_tir.Schedule(computation(M, N, K, cfg))
            block = sch.get_sblock("C")
            pads = padding.named_pads(sch)
        tiles = self.schedule_block(sch, block, pads, staged, cfg, N)
        if epilogue is not None:
            if fused:
                epilogue_.fuse(sch, tiles.block, tiles.thread_j)
            else:
                epilogue_.separate(sch)
        return sch


def _step(module: ModuleType) -> Step:
    return Step(module.NUMBER, module.NAME, module.IDEA, module.Config, dict(module.PASS_CONFIG),
                module, module.default_config, getattr(module, "PRECISION", "fp32"),
                getattr(module, "TENSOR_CORES", False), getattr(module, "ARCH", None),
                tuple(getattr(module, "DTYPES", ("fp32",))))


# The rungs in order, one module each (schedules/stepN_*.py).
STEP_MODULES = (
    "step1_grid",
    "step2_register_tile",
    "step3_shared",
    "step4_cooperative_fetch",
    "step5_registers",
    "step6_double_buffer",
    "step7_async_copy",
    "step8_conflict_free",
    "step9_warp_tile",
    "step10_tuned",
    "step11_split_k",
    "step12_tensorize",
    "step13_tc_pipeline",
    "step14_3xtf32",
    "step15_wgmma",
    "step16_warp_specialized",
    "step17_wide_tile",
    "step18_register_a",
    "step19_3xtf32_wgmma",
    "step20_persistent",
    "step21_cluster",
    "step22_tma_store",
    "step23_split_k_wgmma",
    "step24_matvec",
    "step25_3xtf32_persistent",
    "step26_cluster_split_k",
    "step27_stream_k",
    "step28_3xfp16",
    "step29_dependent_launch",
    "step30_dependent_cluster_split_k",
    "step31_dependent_stream_k",
)
STEPS: tuple[Step, ...] = tuple(_step(importlib.import_module(f".{name}", __name__)) for name in STEP_MODULES)
# The written kernels (Hopper rungs) whose store takes a fused epilogue (their modules' EPILOGUE).
EPILOGUE_RUNGS = tuple(s.number for s in STEPS if getattr(s.module, "EPILOGUE", False))


def get_step(step: int | Step) -> Step:
    if isinstance(step, Step):
        return step
    for s in STEPS:
        if s.number == step:
            return s
    raise ConfigError(f"unknown step {step!r}; steps are {STEPS[0].number}-{STEPS[-1].number}")


def target(arch: str = "sm_90") -> Target:
    if arch not in VALID_ARCHS:
        raise ConfigError(f"unknown arch {arch!r}; valid: {', '.join(VALID_ARCHS)}")
    return Target({"kind": "cuda", "arch": arch})


def device_passes(step: Step, cfg, K: int) -> list:
    """Lowering passes of ours a step's kernel needs, run after TVM's ThreadSync
    (schedules/lowering/pipelines.py): one barrier per k slice where the config asks
    (schedules/lowering/one_barrier.py), a second accumulator where an fp32 sum runs over a long K
    (schedules/lowering/long_k.py), and the fp32 fallback for the outputs a 3xTF32 step makes NaN or tiny
    (schedules/lowering/fp32_fallback.py), and steps 29-31's wait at the top of each kernel. A kernel
    that needs none builds anywhere TVM builds a PrimFunc (inside a model:
    schedules/integration/relax_dispatch.py)."""
    passes = []
    if getattr(cfg, "barriers", 2) == 1:
        passes.append(one_barrier.single_barrier_pass)
    if step.precision == "fp32" and long_k.applies(cfg, K):
        passes.append(long_k.promote_pass)
    if getattr(step.module, "FP32_FALLBACK", False):
        passes.append(fp32_fallback.fp32_fallback_pass)
    if hasattr(step.module, "launch_passes"):  # steps 29-31: each kernel waits for its predecessor at its top
        passes.append(step.module.launch_passes()[1])
    return passes


def first_passes(step: Step) -> tuple:
    """Passes of ours run before all of TVM's, on the whole module (steps 29-31 mark their
    functions' kernels for programmatic dependent launch, which TVM decides where it splits host
    from kernels; their device pass, in ``device_passes``, makes each of them wait)."""
    return (step.module.launch_passes()[0],) if hasattr(step.module, "launch_passes") else ()


def build(step: int | Step, M: int, N: int, K: int, arch: str = "sm_90", config=None, epilogue=None,
          fused: bool = True, dtype: str = "fp32"):
    """Compile a step for one size; the result's ``main(A, B, C)`` computes C = A @ B (with an
    `epilogue`, ``main(A, B, [bias], [C_in], D)``: see Step.schedule). `dtype`: the inputs'
    (fp32, fp16, bf16); 16-bit inputs give C in that dtype, accumulated in fp32."""
    s = get_step(step)
    target(arch)  # an unknown arch: one line, before anything else
    tgt = target(s.build_arch(arch))
    s.check_dtype(dtype)
    cfg = s.default_config(M, N, K, dtype) if config is None else config
    # Schedule first: it rejects a config of the wrong class (a dict, another step's) with
    # its one-line ConfigError; then the per-arch shared-memory limit, before compiling.
    sch = s.schedule(M, N, K, cfg, epilogue, fused, dtype)
    cfg.check_shared_memory(s.build_arch(arch))
    pipeline = pipelines.with_device_passes(*device_passes(s, cfg, K), first=first_passes(s))
    with tvm.transform.PassContext(opt_level=3, config=s.pass_config):
        return tvm.compile(sch.mod, target=tgt, tir_pipeline=pipeline)


def fastest(M: int, N: int, K: int, precision: str = "fp32", arch: str = "sm_90", gpu: str | None = None,
            doc: dict | None = None) -> Choice:
    """The ladder's fastest step for C[M, N] = A[M, K] @ B[K, N], with its config and why
    (schedules/dispatch.py: the rule, from the committed measurements of
    ``schedules/tuned/dispatch.json``; no GPU needed).

    precision "fp32": the steps that give SGEMM's accuracy (1-11, 14, 19, 24, 25, 28); "tf32": the TF32
    steps (12, 13, 15-18, 20-23, 26, 27, 29-31), checked to TF32's tolerance; "fp16" / "bf16": the steps with
    that 16-bit form (inputs and C in the dtype; the config is the step's 16-bit one). `gpu`: a table by slug or name (default:
    the first measured on `arch`'s family); `doc`: a table to read instead of the committed one.
    ConfigError, one line, on bad sizes, precision, arch or gpu."""
    target(arch)  # an unknown arch: one line
    return dispatch.choose(M, N, K, precision, arch, STEPS, gpu, doc)


def cuda_source(lib) -> str:
    """The CUDA C++ that TVM generated for a built step."""
    return lib.mod.imports[0].inspect_source()
