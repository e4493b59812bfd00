"""The dispatch rule inside a TVM model: a Relax pass that gives each matmul the ladder's kernel.

    import schedules.integration.relax_dispatch as ladder
    mod = ladder.DispatchMatmuls(arch="sm_90a")(mod)          # before LegalizeOps
    with tvm.transform.PassContext(opt_level=3, config=ladder.PASS_CONFIG):
        ex = tvm.compile(mod, target=schedules.target("sm_90a"))

    # or the whole pipeline: the Hopper kernels placed here, the rest by the dlight rule, fused
    relax_pipeline, dispatch, rule = ladder.pipeline("sm_90a")
    with tvm.transform.PassContext(opt_level=3, config=ladder.PASS_CONFIG):
        ex = tvm.compile(mod, target=schedules.target("sm_90a"), relax_pipeline=relax_pipeline)

A model reaches the ladder at the Relax level, before its operators become TensorIR: each
``R.matmul(x, w)`` whose operands are float32 (the pass's precision "fp32" or "tf32") or, with
precision "fp16" / "bf16", float16 / bfloat16 with a product of the same dtype (fp32 sums, as
``schedules.fastest(..., precision=)`` measures them), with static shapes, x of shape [..., M', K] and w a
2-D [K, N] (a weight, as ``nn.Linear`` gives after its transpose: lift that transpose out of the
forward pass with ``relax.transform.LiftTransformParams``, as every TVM deployment does) becomes

    x2 = R.reshape(x, (M, K))                               # M = the product of x's leading dims
    c = R.call_tir(ladder_kernel, (x2, w), R.Tensor((M, N)))
    y = R.reshape(c, (..., N))

where ``ladder_kernel`` is the PrimFunc ``schedules.fastest`` picks for (M, N, K), scheduled by its
step, marked ``tirx.is_scheduled`` (dlight leaves it alone) and opaque (FuseOps fuses nothing
into it). Reshapes of contiguous tensors are views: nothing is copied. What follows the product
in the model (bias, GELU, a residual add) stays Relax operators, which FuseOps fuses into one
elementwise kernel that dlight schedules; fusing them into the ladder's store is
schedules/transforms/epilogue.py's job and the dlight rule's (schedules/integration/ladder_rule.py).

Which kernels a model can take: those whose build needs none of the ladder's own lowering passes
(``schedules.device_passes`` empty), because a model is lowered by one TIR pipeline for all its
functions. That excludes step 14 (its fp32 fallback is a lowering pass) and step 11 where its
serial K reaches 8192 (schedules/lowering/long_k.py); among the rest ``fastest`` picks from the committed
measurements as always. The Hopper rungs (15-22) need the module built for sm_90a; for another
arch they are not candidates. A matmul nothing can take (a batched weight, a dynamic shape,
another dtype, a 16-bit product asked for in float32, a shape with no allowed step) is left as it
was, for dlight. In 16-bit every pick is placed here, the mma.sync step 13 too: the dlight rule
(and with it the fused epilogue) is fp32's so far (issue 50), so a 16-bit product's bias and
activation run as dlight's fused elementwise kernel after it.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import STEPS, ConfigError, device_passes, dispatch, get_step
from . import ladder_rule

# What the ladder's kernels need of the PassContext (cp.async, buffers kept apart): the rule's,
# harmless to the model's other kernels.
PASS_CONFIG = ladder_rule.PASS_CONFIG
OPAQUE = 8  # relax's OpPatternKind kOpaque: FuseOps fuses nothing into a call of it

_MATMUL = tvm.ir.Op.get("relax.matmul")


# The tensors' dtype each precision takes (fp32 and tf32: fp32 inputs; fp16 and bf16 their own).
TENSOR_DTYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
PRECISIONS = tuple(TENSOR_DTYPE)


def static_shape(expr, dtype: str = "float32") -> tuple[int, ...] | None:
    """expr's shape where its struct info is a `dtype` tensor of known static shape."""
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.dtype != dtype or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):  # a symbolic dimension
        return None


def in_model(step, M: int, N: int, K: int, precision: str = "fp32") -> bool:
    """Whether `step`'s kernel at M x N x K builds inside a model (Step.builds_in_model; in
    16-bit, its 16-bit config's: a step without that dtype is not a candidate anyway)."""
    if precision not in dispatch.SIXTEEN_BIT:
        return step.builds_in_model(M, N, K)
    if precision not in step.dtypes:
        return False
    return not device_passes(step, step.default_config(M, N, K, precision), K)


def kernel(M: int, N: int, K: int, precision: str, arch: str, gpu: str | None = None):
    """(the Choice, its scheduled PrimFunc, a name for it) for one matmul of a model;
    ConfigError if no step is allowed."""
    hopper_ok = arch == "sm_90a"
    choice = dispatch.choose(M, N, K, precision, "sm_90" if arch == "sm_90a" else arch, STEPS, gpu,
                             allow=lambda s: in_model(s, M, N, K, precision) and (s.arch is None or hopper_ok))
    dtype = precision if precision in dispatch.SIXTEEN_BIT else "fp32"
    sch = choice.step.schedule(M, N, K, choice.config, dtype=dtype)
    name = f"ladder_step{choice.step.number}_{M}x{N}x{K}" + ("" if dtype == "fp32" else f"_{dtype}")
    func = sch.mod["main"].with_attrs({"global_symbol": name, "tirx.is_scheduled": True, "op_pattern": OPAQUE,
                                       "ladder.step": choice.step.number})
    return choice, func, name


@mutator
class _Dispatcher(PyExprMutator):
    def __init__(self, mod, precision: str, arch: str, gpu: str | None, kernels_only: bool):
        super().__init__(mod)
        self.precision, self.arch, self.gpu, self.kernels_only = precision, arch, gpu, kernels_only
        self.kernels: dict[tuple[int, int, int], tvm.ir.GlobalVar] = {}
        self.chosen: list[tuple[tuple[int, int, int], int]] = []

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op != _MATMUL:
            return call
        x, w = call.args
        dtype = TENSOR_DTYPE[self.precision]
        xs, ws = static_shape(x, dtype), static_shape(w, dtype)
        if xs is None or ws is None or len(xs) < 2 or len(ws) != 2 or xs[-1] != ws[0]:
            return call
        if call.attrs.out_dtype is not None and str(call.attrs.out_dtype) not in ("", "void", dtype):
            return call  # a product asked for in another dtype (e.g. bf16 operands, float32 out)
        M, K, N = math.prod(xs[:-1]), xs[-1], ws[1]
        if (M, N, K) not in self.kernels:
            try:
                choice, func, name = kernel(M, N, K, self.precision, self.arch, self.gpu)
            except ConfigError:  # no allowed step for it: dlight's
                return call
            if self.kernels_only and choice.step.schedules_a_block and self.precision not in dispatch.SIXTEEN_BIT:
                return call  # the dlight rule's (schedules/integration/ladder_rule.py), which fuses its epilogue
            self.kernels[(M, N, K)] = self.builder_.add_func(func, name)
            self.chosen.append(((M, N, K), choice.step.number))
        gv = self.kernels[(M, N, K)]
        x2 = x if len(xs) == 2 else self.builder_.emit(relax.op.reshape(x, (M, K)))
        out = relax.call_tir(gv, [x2, w], relax.TensorType((M, N), dtype))
        if len(xs) == 2:
            return out
        return relax.op.reshape(self.builder_.emit(out), (*xs[:-1], N))


@tvm.transform.module_pass(opt_level=0, name="DispatchMatmuls")
class DispatchMatmuls:
    """The Relax pass (see the module's docstring). After it runs, ``chosen`` lists each
    distinct (M, N, K) rewritten and the step that runs it."""

    def __init__(self, arch: str = "sm_90a", precision: str = "fp32", gpu: str | None = None,
                 kernels_only: bool = False):
        from .. import VALID_ARCHS

        if arch not in VALID_ARCHS:
            raise ConfigError(f"unknown arch {arch!r}; valid: {', '.join(VALID_ARCHS)}")
        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)} (fp32 and tf32: a model's "
                              f"float32 matmuls; fp16, bf16: its float16, bfloat16 ones), got {precision!r}")
        self.arch, self.precision, self.gpu, self.kernels_only = arch, precision, gpu, kernels_only
        self.chosen: list = []

    def transform_module(self, mod, ctx):
        rewriter = _Dispatcher(mod, self.precision, self.arch, self.gpu, self.kernels_only)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        self.chosen = rewriter.chosen
        return rewriter.builder_.get()


def pipeline(arch: str = "sm_90a", precision: str = "fp32", gpu: str | None = None):
    """TVM's default CUDA pipeline with the ladder in it: ``DispatchMatmuls(kernels_only=True)``
    first (the matmuls whose pick is a kernel written out, the Hopper rungs), then, where dlight
    schedules the fused functions, ``LadderMatmul`` (schedules/integration/ladder_rule.py) ahead of dlight's
    own rules (the matmuls whose pick is a TensorIR schedule, with their epilogues fused).
    Returns (the pass for ``tvm.compile(..., relax_pipeline=)``, the DispatchMatmuls pass, the
    rule), so a caller can read what each chose. Compile under PASS_CONFIG."""
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir import dlight as dl

    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    dispatch_pass = DispatchMatmuls(arch, precision, gpu, kernels_only=True)
    # The dlight rule takes float32 blocks only: in a 16-bit model it declines every block.
    rule = ladder_rule.LadderMatmul(precision if precision in dispatch.MODEL_PRECISIONS else "fp32", gpu)
    legalize = [tvm.relax.transform.LegalizeOps(), tvm.relax.transform.AnnotateTIROpPattern(),
                tvm.relax.transform.FoldConstant(), tvm.relax.transform.FuseOps(), tvm.relax.transform.FuseTIR(),
                dl.ApplyDefaultSchedule(rule, dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                        dl.gpu.GeneralReduction(), dl.gpu.Fallback())]

    @tvm.transform.module_pass(opt_level=0, name="LadderPipeline")
    def _pipeline(mod, _ctx):
        with target:
            seq = tvm.transform.Sequential([dispatch_pass] + cuda.library_dispatch_passes(target) + legalize
                                           + cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target))
            return seq(mod)

    return _pipeline, dispatch_pass, rule


def steps_used(mod) -> dict[str, int]:
    """The ladder kernels in a module: {function name: step}."""
    return {gv.name_hint: int(f.attrs["ladder.step"]) for gv, f in mod.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "ladder.step" in f.attrs}


__all__ = ["DispatchMatmuls", "PASS_CONFIG", "PRECISIONS", "kernel", "pipeline", "steps_used", "in_model", "get_step"]
