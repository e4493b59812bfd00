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
into it). Reshapes of contiguous tensors are views: nothing is copied.

What follows the product, where the pick's kernel can store it (a Hopper rung with a fused
epilogue, ``schedules.EPILOGUE_RUNGS``), goes into the kernel's store (``epilogue_chains``): a
bias add (a [N] tensor), then a residual add (a tensor of the product's shape), then a GELU or a
SiLU, each optional and each the only use of what it reads, is ``D = gelu(acc + bias + C_in)``
(schedules/transforms/epilogue.py) computed from the fp32 sums and rounded once:

    d = R.call_tir(ladder_kernel_bias_res, (x2, w, bias, r2), R.Tensor((M, N)))

A gated pair (a SwiGLU MLP's ``silu(x W_g + b_g) * (x W_u + b_u)``) is two kernels: W_u's
product with its bias, then W_g's, whose store multiplies ``silu(acc + b_g)`` by the first's
output (``Epilogue(gate=True)``: C_in multiplies instead of adding), so no elementwise kernel
reads the two products back.

The rungs that store from registers (20, 21, and 23 in one part) on step 22's 256 x 128 tile hand
such a product to step 22, which stages the tile in shared memory and stores it with TMA: there a
bias costs 1-3% over the bare product and a GELU 12-13%, where the register store costs 8% and
25-29% (bf16 and fp16, 4096^3, H200, 2026-11-28; docs/models.md). A split-K pick (step 23)
applies it in its sum of the parts; a smaller tile, in its register store.
What the pick's kernel cannot take (steps 13 and 24 in 16-bit) stays Relax operators, which
FuseOps fuses into one elementwise kernel that dlight schedules; for the TensorIR steps the dlight
rule fuses it (schedules/integration/ladder_rule.py).

Which kernels a model can take: those whose build needs none of the ladder's own lowering passes
(``schedules.device_passes`` empty), because a model is lowered by one TIR pipeline for all its
functions. That excludes step 14 (its fp32 fallback is a lowering pass) and step 11 where its
serial K reaches 8192 (schedules/lowering/long_k.py); among the rest ``fastest`` picks from the committed
measurements as always. The Hopper rungs (15-22) need the module built for sm_90a; for another
arch they are not candidates. A matmul nothing can take (a batched weight, a dynamic shape,
another dtype, a 16-bit product asked for in float32, a shape with no allowed step) is left as it
was, for dlight. In 16-bit every pick is placed here, the mma.sync step 13 too: the dlight rule
is fp32's.

A model's pick also weighs what the kernels cost the host: a plain call issues them from the VM one
by one, and at a few tokens they run for less time than that takes. ``kernel`` gives
``dispatch.choose`` the host's time to issue each candidate (``host_time``: HOST_LAUNCH_US a
kernel, and one more for an epilogue the kernel cannot fuse), and the pick is the least of the
measured time and that, whichever is longer (a bf16 block at 16 tokens: step 26's one kernel for
step 23's two, 85 -> 63 us a call on an H200; docs/models.md).

A kernel's scratch in global memory (the split copies of steps 19, 25 and 28, split-K partial
sums) becomes an extra output of its ``call_tir`` (``scratch.LiftScratch``), which Relax plans
and a CUDA graph keeps: ``DispatchMatmuls`` does that for its kernels, ``pipeline()`` once more
after dlight. A pipeline of one's own that schedules such kernels later should run
``LiftScratch()`` after its last schedule.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .. import STEPS, ConfigError, device_passes, dispatch, get_step
from . import ladder_rule
from .scratch import LiftScratch, top_statements

# What the ladder's kernels need of the PassContext (cp.async, buffers kept apart): the rule's,
# harmless to the model's other kernels.
PASS_CONFIG = ladder_rule.PASS_CONFIG
OPAQUE = 8  # relax's OpPatternKind kOpaque: FuseOps fuses nothing into a call of it

_MATMUL = tvm.ir.Op.get("relax.matmul")
_ADD = tvm.ir.Op.get("relax.add")
_MUL = tvm.ir.Op.get("relax.multiply")
_ACTIVATIONS = {tvm.ir.Op.get("relax.nn.gelu"): "gelu", tvm.ir.Op.get("relax.nn.silu"): "silu"}
# The Hopper rungs whose store writes registers to global memory hand a product with an epilogue
# to this one, which stages it in shared memory and stores it with TMA (the docstring's numbers).
TMA_STORE_STEP = 22


# What the host takes to issue one kernel of a model called from the VM (host_time). A plain call
# issues every kernel from the host, one by one; where kernels take a few microseconds, the host
# sets the pace. On an H200 (2026-11-29, the bf16 block at 16 tokens,
# results/nvidia-h200/evidence/model_launches.txt) the VM issued 9 kernels in 62.6 us a call back
# to back and the same products as 6 kernels (step 26 for step 23's two) in 55.0: 2.5 us a
# launch, at the same time on the GPU (19.4 and 20.1 us); steps.model's time of one call fell from
# 85.1 to 63.0 us. The rows (steps.bench) time kernels launched back to back, where the host runs
# ahead: they do not see it.
HOST_LAUNCH_US = 3.0


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


def epilogue_step(step, cfg, M: int, N: int, K: int, dtype: str):
    """(step, config) whose kernel stores the pick's product with a fused epilogue, or None where
    the pick takes none: step 22 where the pick is a rung that stores from registers (20, 21, 23
    in one part) on step 22's own tile (256 x 128) and TMA can address the output; else the pick
    itself if it is an epilogue rung (a smaller tile keeps its kernel: step 22's tile would leave
    SMs idle at few tokens, 24 blocks at 128 x 3072)."""
    from .. import EPILOGUE_RUNGS, step22_tma_store, step23_split_k_wgmma
    from ..transforms import wgmma

    store = get_step(TMA_STORE_STEP)
    staged = store.default_config(M, N, K, dtype)
    one_part = step.number == 23 and step23_split_k_wgmma.parts(wgmma.plan(M, N, K, cfg, dtype), cfg.split_k)[1] == 1
    if ((step.number in (20, 21) or one_part) and (cfg.block_m, cfg.block_n) == (staged.block_m, staged.block_n)
            and step22_tma_store.tma_store_fits(M, N, dtype)):
        return store, staged
    return (step, cfg) if step.number in EPILOGUE_RUNGS else None


def _epilogue_tag(ep) -> str:
    return "" if ep is None else f"_{ep.tag()}"


def launches(func) -> int:
    """The kernels a scheduled PrimFunc launches: its top-level loop nests bound to blockIdx."""

    def count(stmt) -> int:
        if isinstance(stmt, tvm.tirx.SeqStmt):
            return sum(count(s) for s in stmt.seq)
        if isinstance(stmt, tvm.tirx.For):
            bound = stmt.thread_binding is not None and str(stmt.thread_binding.thread_tag).startswith("blockIdx")
            return 1 if bound else count(stmt.body)
        if isinstance(stmt, tvm.s_tir.SBlockRealize):
            return count(stmt.block.body)
        inner = getattr(stmt, "body", None)
        return count(inner) if isinstance(inner, tvm.tirx.Stmt) else 0

    return sum(count(s) for s in top_statements(func)[1])


def host_time(M: int, N: int, K: int, precision: str, epilogue=None):
    """``dispatch.choose``'s host time for a matmul of a model: HOST_LAUNCH_US for each kernel the
    step launches (step 23 in parts: two; step 28: its copies and the product), and one more where
    the model has an `epilogue` the step's kernel cannot fuse (FuseOps makes it an elementwise
    kernel: steps 13 and 24 in 16-bit)."""
    dtype = precision if precision in dispatch.SIXTEEN_BIT else "fp32"

    def issue(step, cfg) -> float:
        try:
            n = launches(step.schedule(M, N, K, cfg, dtype=dtype).mod["main"])
        except ConfigError:
            return math.inf
        # A TensorIR step of an fp32 model is the dlight rule's, which fuses the epilogue itself.
        by_rule = step.schedules_a_block and precision not in dispatch.SIXTEEN_BIT
        if epilogue is not None and not by_rule and epilogue_step(step, cfg, M, N, K, dtype) is None:
            n += 1
        return HOST_LAUNCH_US * n

    return issue


def kernel(M: int, N: int, K: int, precision: str, arch: str, gpu: str | None = None, epilogue=None):
    """(the step, its scheduled PrimFunc, a name for it) for one matmul of a model, with `epilogue`
    (an Epilogue) fused into its store (``epilogue_step``'s kernel); ConfigError if no step is
    allowed, or where the pick's kernel takes no fused epilogue. The pick is the step whose kernels
    run or are issued soonest, whichever is longer (``host_time``)."""
    hopper_ok = arch == "sm_90a"
    choice = dispatch.choose(M, N, K, precision, "sm_90" if arch == "sm_90a" else arch, STEPS, gpu,
                             allow=lambda s: in_model(s, M, N, K, precision) and (s.arch is None or hopper_ok),
                             host=host_time(M, N, K, precision, epilogue))
    dtype = precision if precision in dispatch.SIXTEEN_BIT else "fp32"
    step, cfg = choice.step, choice.config
    if epilogue is not None:
        fused = epilogue_step(step, cfg, M, N, K, dtype)
        if fused is None:
            raise ConfigError(f"step {step.number}'s kernel takes no fused epilogue")
        step, cfg = fused
    sch = step.schedule(M, N, K, cfg, epilogue, dtype=dtype)
    name = f"ladder_step{step.number}_{M}x{N}x{K}" + ("" if dtype == "fp32" else f"_{dtype}") + _epilogue_tag(epilogue)
    func = sch.mod["main"].with_attrs({"global_symbol": name, "tirx.is_scheduled": True, "op_pattern": OPAQUE,
                                       "ladder.step": step.number})
    return step, func, name


class Chain:
    """A matmul and what follows it that a store can apply (``epilogue_chains``)."""

    def __init__(self, matmul, bias=None, residual=None, activation=None, gate=None, absorbed=()):
        self.matmul, self.bias, self.residual, self.activation = matmul, bias, residual, activation
        self.gate, self.absorbed = gate, absorbed

    @property
    def c_in(self):
        """The tensor the store reads beside the product: the residual, or the gate."""
        return self.residual if self.residual is not None else self.gate

    @property
    def epilogue(self):
        from ..transforms.epilogue import Epilogue

        return Epilogue(bias=self.bias is not None, activation=self.activation,
                        beta=1.0 if self.residual is not None else 0.0, gate=self.gate is not None)


def epilogue_chains(func, dtype: str) -> dict:
    """{the last var of a chain: Chain} in `func`'s dataflow blocks: a matmul of `dtype` tensors,
    then, each optional, R.add of a [N] bias, R.add of a residual of the product's shape (either
    operand order), R.nn.gelu or R.nn.silu, and (without a residual) R.multiply by a tensor of the
    product's shape, a gate; each var folded in has one user, the next op, and is local to its
    block. Only chains with at least one op after the matmul.

    A gated pair ``silu(x W_g + b_g) * (x W_u + b_u)`` gives two chains that end at the same
    multiply; the one that folds in more takes it (W_g's: bias, SiLU, and the gate, which is
    W_u's sum), and the other stops before it (W_u's: its bias), so the pair is two kernels. Of
    two chains as long, the later one takes it (``y = x W_1 + h W_2``: W_2's, W_1's a plain one)."""
    chains = {}
    blocks = getattr(func.body, "blocks", [])
    for block in blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        users = relax.analysis.udchain(block)
        value = {b.var: b.value for b in block.bindings if isinstance(b, relax.VarBinding)}

        def only_user(var):
            """The binding var of `var`'s one user, where it is local and used once."""
            use = users.get(var, [])
            return use[0] if isinstance(var, relax.DataflowVar) and len(use) == 1 and use[0] in value else None

        def other(call, var):
            """The operand of a binary `call` that is not `var` (None where both are)."""
            a, b = call.args
            return b if a.same_as(var) and not b.same_as(var) else a if b.same_as(var) and not a.same_as(var) else None

        def grow(var, call, shape, stop=None):
            """The chain from matmul `var`, (end, Chain), folding in nothing from `stop` on."""
            chain, end, absorbed = Chain(call), var, []

            def following(*ops):
                """The call that uses `end` next, where it is one of `ops` and may be folded in."""
                nxt = only_user(end)
                if nxt is None or (stop is not None and nxt.same_as(stop)):
                    return None, None
                call = value[nxt]
                return (nxt, call) if isinstance(call, relax.Call) and call.op in ops else (None, None)

            nxt, add = following(_ADD)
            if nxt is not None:
                b = other(add, end)
                if b is not None and static_shape(b, dtype) == (shape[-1],):
                    chain.bias, end, absorbed = b, nxt, absorbed + [end]
            nxt, add = following(_ADD)
            if nxt is not None:
                r = other(add, end)
                if r is not None and static_shape(r, dtype) == shape:
                    chain.residual, end, absorbed = r, nxt, absorbed + [end]
            nxt, act = following(*_ACTIVATIONS)
            if nxt is not None:
                chain.activation, end, absorbed = _ACTIVATIONS[act.op], nxt, absorbed + [end]
            nxt, mul = following(_MUL)
            if nxt is not None and chain.residual is None:  # C_in is a residual or a gate, not both
                g = other(mul, end)
                if g is not None and static_shape(g, dtype) == shape:
                    chain.gate, end, absorbed = g, nxt, absorbed + [end]
            chain.absorbed = tuple(absorbed)
            return end, chain

        for var, call in value.items():
            if not (isinstance(call, relax.Call) and call.op == _MATMUL):
                continue
            shape = static_shape(var, dtype)
            if shape is None:
                continue
            end, chain = grow(var, call, shape)
            if not chain.absorbed:
                continue
            rival = chains.get(end)
            if rival is not None:
                # Two chains end at one op (a residual add or a gate multiply of their two sums):
                # the one that folds in more keeps it, the other stops before it.
                keep, give_up = (rival, chain) if len(rival.absorbed) > len(chain.absorbed) else (chain, rival)
                chains[end] = keep
                mm = give_up.absorbed[0]
                end2, cut = grow(mm, give_up.matmul, static_shape(mm, dtype), stop=end)
                if cut.absorbed:
                    chains[end2] = cut
            else:
                chains[end] = chain
    return chains


@mutator
class _Dispatcher(PyExprMutator):
    def __init__(self, mod, precision: str, arch: str, gpu: str | None, kernels_only: bool):
        super().__init__(mod)
        self.precision, self.arch, self.gpu, self.kernels_only = precision, arch, gpu, kernels_only
        self.kernels: dict[tuple, tvm.ir.GlobalVar] = {}
        self.chosen: list[tuple[tuple[int, int, int], int]] = []
        self.chains: dict = {}  # the last var of each chain taken: (Chain, its kernel)
        self.absorbed: set = set()

    def _operands(self, call):
        """(x, w, M, N, K, x's shape) of a matmul the pass can take, or None."""
        x, w = call.args
        dtype = TENSOR_DTYPE[self.precision]
        xs, ws = static_shape(x, dtype), static_shape(w, dtype)
        if xs is None or ws is None or len(xs) < 2 or len(ws) != 2 or xs[-1] != ws[0]:
            return None
        if call.attrs.out_dtype is not None and str(call.attrs.out_dtype) not in ("", "void", dtype):
            return None  # a product asked for in another dtype (e.g. bf16 operands, float32 out)
        return x, w, math.prod(xs[:-1]), ws[1], xs[-1], xs

    def _gv(self, M, N, K, epilogue=None):
        """The module's function for (M, N, K) with `epilogue`, added once; ConfigError where no
        step (or no fused epilogue) takes it."""
        key = (M, N, K, _epilogue_tag(epilogue))
        if key not in self.kernels:
            step, func, name = kernel(M, N, K, self.precision, self.arch, self.gpu, epilogue)
            if self.kernels_only and step.schedules_a_block and self.precision not in dispatch.SIXTEEN_BIT:
                # the dlight rule's (schedules/integration/ladder_rule.py), which fuses its epilogue
                raise ConfigError("a TensorIR step's: the dlight rule's")
            self.kernels[key] = self.builder_.add_func(func, name)
            self.chosen.append(((M, N, K), step.number))
        return self.kernels[key]

    def take_chains(self, func):
        """Decide, before rewriting `func`, which epilogue chains go into a kernel's store."""
        for end, chain in epilogue_chains(func, TENSOR_DTYPE[self.precision]).items():
            ops = self._operands(chain.matmul)
            if ops is None:
                continue
            _, _, M, N, K, _ = ops
            try:
                gv = self._gv(M, N, K, chain.epilogue)
            except ConfigError:
                continue
            self.chains[end] = (chain, gv)
            self.absorbed.update(chain.absorbed)

    def visit_var_binding_(self, binding):
        var = binding.var
        if var in self.absorbed:
            return  # folded into its chain's kernel, bound at the chain's end
        if var not in self.chains:
            return super().visit_var_binding_(binding)
        chain, gv = self.chains[var]
        x, w, M, N, K, xs = self._operands(chain.matmul)
        dtype = TENSOR_DTYPE[self.precision]
        flat = lambda e: (self.visit_expr(e) if len(xs) == 2  # noqa: E731
                          else self.builder_.emit(relax.op.reshape(self.visit_expr(e), (M, -1))))
        args = [flat(x), self.visit_expr(w)]
        if chain.bias is not None:
            args.append(self.visit_expr(chain.bias))
        if chain.c_in is not None:  # a residual, or a gated pair's other sum
            args.append(flat(chain.c_in))
        out = relax.call_tir(gv, args, relax.TensorType((M, N), dtype))
        if len(xs) != 2:
            out = relax.op.reshape(self.builder_.emit(out), (*xs[:-1], N))
        self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(out)))

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op != _MATMUL:
            return call
        ops = self._operands(call)
        if ops is None:
            return call
        x, w, M, N, K, xs = ops
        dtype = TENSOR_DTYPE[self.precision]
        try:
            gv = self._gv(M, N, K)
        except ConfigError:  # no allowed step for it, or the dlight rule's: dlight's
            return call
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
                rewriter.take_chains(func)
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        self.chosen = rewriter.chosen
        # The kernels' scratch as tensors of the model, not workspace pages (scratch.py: a CUDA
        # graph replays a page's address after the pool has lent or freed it).
        added = [gv.name_hint for gv in rewriter.kernels.values()]
        return LiftScratch(only=added)(rewriter.builder_.get())


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
                                        dl.gpu.GeneralReduction(), dl.gpu.Fallback()),
                LiftScratch()]  # what the schedules left in global memory: the model's tensors (scratch.py)

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


__all__ = ["DispatchMatmuls", "PASS_CONFIG", "PRECISIONS", "Chain", "epilogue_chains", "epilogue_step", "kernel",
           "pipeline", "steps_used", "in_model", "get_step"]
