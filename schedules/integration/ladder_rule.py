"""The ladder as a dlight rule: a model's fp32 matmul functions scheduled by the ladder's steps.

    from tvm.s_tir import dlight as dl
    from schedules.integration.ladder_rule import LadderMatmul
    mod = dl.ApplyDefaultSchedule(LadderMatmul(), dl.gpu.Matmul(), dl.gpu.Fallback())(mod)

Relax lowers a model's operators to TensorIR functions and fuses what follows a matmul into
it: ``fused_matmul_add_gelu`` computes ``matmul[b, i, j] += x[b, i, k] * w[k, j]``, then a
block per elementwise operator (bias add, GELU's multiply, erf, multiply, add), then maybe a
residual add. dlight hands each function to its rules in turn, and the first that returns a
schedule wins. ``LadderMatmul.apply``:

1. **Recognises** (``match``) a function made of one fp32 matmul block and elementwise blocks
   after it that read its result at the same index: the product's operands may have leading
   dimensions (folded into M: a [b, t, k] activation is a (b t) x k matrix, the way
   ``nn.Linear`` applies to a batch of tokens), B may be K x N (NN) or N x K (NT, x @ W^T without
   a transpose). Where B has every leading dimension of the product too (a batched matmul:
   attention's q k^T and p v) they are a batch instead, one product per index, bound to
   blockIdx.z (schedules/integration/batched.py). B broadcast over some leading dims only is declined, like
   anything else it does not recognise (another dtype, a symbolic shape, a producer block
   before the product): it returns None and the next rule takes the function.
2. **Chooses** the step with ``schedules.fastest`` for (M, N, K) (a batch: batches x M rows), among the steps that are
   schedules of a TensorIR block (1-13: 14 computes on split operands and 15-22 are kernels
   written out, which ``schedules/integration/relax_dispatch.py`` places in a model at the Relax level) and
   build without a lowering pass of the ladder's own (``Step.builds_in_model``).
3. **Rewrites** the product the way ``Step.schedule`` sees the base matmul: blocks ``A_pad``
   and ``B_pad`` copy the function's operands into a padded M x K and K x N (unfolding the
   leading dimensions, transposing B for NT), block ``C`` multiplies them, and ``C_pad`` stores
   the product where the function stored it (a batch: each block with the batch outermost,
   ``batched_product``). The elementwise blocks stay as the function had them.
4. **Schedules** it with the step (``Step.schedule_block``: tiles, shared memory, pipeline;
   the pad blocks folded into the copies, so the operands are read where they lie, with no copy
   kernel), then folds the elementwise blocks into the step's store (schedules/transforms/epilogue.py's
   idea): each but the last is ``compute_inline``d into its consumers (they form a DAG: GELU
   reads the biased value twice), and the last, now the whole epilogue as one expression of the
   product, is ``reverse_compute_inline``d into the write-back. Bias, GELU and a residual add
   run on the accumulator in registers, and the function is one kernel (two with split-K).
   Where the last cannot be inlined it goes under the store's thread loop, or failing that
   becomes an elementwise kernel of its own.

The kernels need TVM's ``tirx.use_async_copy`` for their cp.async pipelines: compile with
``relax_dispatch.PASS_CONFIG``. NT is read in place: B^T's rows are K-contiguous, so the copy of
B's tile into shared memory walks the tile in the source's order, one float per load, consecutive
threads along K (``transforms.source_transposed``). A float4 there would gather four rows, and
TVM 0.27's cp.async injection emits a 16-byte copy from such a strided vector's base: until
2026-11-25 every NT kernel through steps 7-13 read the wrong floats, or faulted (misaligned
address on the H100; found by the first GPU run of the batched tests). Correct now, and slower
than NN by its 4-byte copies (batched 16x512x512x64: NT 0.82x torch.bmm, NN's mirror 1.30x); a
model whose weights are parameters lifts the transpose out instead (``LiftTransformParams``),
and gets NN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.script import tirx as T
from tvm.target import Target

from .. import STEPS, ConfigError, dispatch, target
from ..transforms import padding
from . import batched

BufferLoad = tvm.ir.expr.TensorLoad  # what tirx.BufferLoad(...) builds, as a class (TVM 0.27)

# What the kernels need of the PassContext: cp.async where a schedule pipelines its copies
# (steps 7-13), and buffers kept apart (schedules/integration/relax_dispatch.py passes it on to a model).
PASS_CONFIG = {"tirx.use_async_copy": True, "tirx.disable_storage_rewrite": True}

# Block names the rewritten product uses; a function that has them already is declined.
NAMES = ("A_pad", "B_pad", "C", "C_pad")


@dataclass(frozen=True)
class Pattern:
    """What ``match`` found: the product's buffers and layout, and the blocks after it."""

    block: str  # the matmul block's name
    X: object  # A's buffer: [lead..., M', K]
    Y: object  # B's buffer: [K, N], or [N, K] when transposed
    O: object  # the product's buffer: [lead..., M', N]
    lead: tuple[int, ...]  # the leading dimensions folded into M
    M: int
    N: int
    K: int
    transposed_b: bool
    epilogue: tuple[str, ...]  # the elementwise blocks after the product, in order
    # The leading dimensions B shares with A and the product (a batched matmul: one product per
    # index, attention's q k^T and p v): a grid axis of their own (schedules/integration/batched.py), not
    # folded into M. Empty where B is one matrix; `lead` is then what folds into M.
    batch: tuple[int, ...] = ()

    @property
    def batches(self) -> int:
        return math.prod(self.batch)


def _ints(shape) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None


def _var_index(indices, iter_vars) -> list[int] | None:
    """Each index as the position of the block iter var it is, or None if any is not one."""
    out = []
    for e in indices:
        hits = [n for n, v in enumerate(iter_vars) if e.same_as(v.var)]
        if len(hits) != 1:
            return None
        out.append(hits[0])
    return out


def _product(block) -> tuple | None:
    """(O store, X load, Y load) when `block` is O[...] = O[...] + X[...] * Y[...] in float32."""
    body = block.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, tirx.Add):
        return None
    a, b = body.value.a, body.value.b
    if isinstance(b, BufferLoad) and b.source.same_as(body.buffer):
        a, b = b, a
    if not (isinstance(a, BufferLoad) and a.source.same_as(body.buffer) and isinstance(b, tirx.Mul)):
        return None
    x, y = b.a, b.b
    if not (isinstance(x, BufferLoad) and isinstance(y, BufferLoad)):
        return None
    if any(buf.dtype != "float32" for buf in (body.buffer, x.source, y.source)):
        return None
    init = block.init
    if not (isinstance(init, tirx.BufferStore) and isinstance(init.value, (tirx.FloatImm, tirx.IntImm))
            and float(init.value.value) == 0.0):
        return None
    return body, x, y


def match(func: tirx.PrimFunc) -> Pattern | None:
    """The function's matmul and its elementwise epilogue, or None where it is not one."""
    try:
        sch = s_tir.Schedule(func)
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except (ValueError, AttributeError, RuntimeError):  # TVM raises RuntimeError subclasses
        return None
    if any(b.name_hint in NAMES for b in blocks):
        return None
    reducing = [n for n, b in enumerate(blocks) if any(v.iter_type == tirx.IterVar.CommReduce for v in b.iter_vars)]
    if len(reducing) != 1 or reducing[0] != 0:  # one product, nothing before it
        return None
    block = blocks[0]
    found = _product(block)
    if found is None:
        return None
    store, xl, yl = found
    ivs = list(block.iter_vars)
    reduce = [n for n, v in enumerate(ivs) if v.iter_type == tirx.IterVar.CommReduce]
    spatial = [n for n, v in enumerate(ivs) if v.iter_type == tirx.IterVar.DataPar]
    if len(reduce) != 1 or len(spatial) < 2:
        return None
    o_idx, x_idx, y_idx = (_var_index(load.indices, ivs) for load in (store, xl, yl))
    if None in (o_idx, x_idx, y_idx) or o_idx != spatial:
        return None
    k = reduce[0]
    *lead_vars, i, j = o_idx
    if x_idx != [*lead_vars, i, k]:
        return None
    # B with every leading dimension of the product (batched) or none (leading dims folded into
    # M); B broadcast over some of them only is declined.
    y_lead, y_idx = (lead_vars, y_idx[len(lead_vars):]) if y_idx[:len(lead_vars)] == lead_vars and lead_vars else ([], y_idx)
    if y_idx == [k, j]:
        transposed = False
    elif y_idx == [j, k]:
        transposed = True
    else:
        return None
    O, X, Y = store.buffer, xl.source, yl.source
    o_shape, x_shape, y_shape = (_ints(b.shape) for b in (O, X, Y))
    if None in (o_shape, x_shape, y_shape):
        return None
    extents = _ints([v.dom.extent for v in ivs])
    if extents is None or o_shape != tuple(extents[n] for n in o_idx):
        return None
    lead = o_shape[:-2]
    batch = lead if y_lead else ()
    M, N, K = math.prod(o_shape[len(batch):-1]), o_shape[-1], extents[k]
    if x_shape != (*lead, o_shape[-2], K) or y_shape != (*batch, *((N, K) if transposed else (K, N))):
        return None
    # The blocks after it: elementwise over the product's shape, each writing a buffer of that
    # shape at its own iter vars, in order.
    epilogue = []
    for b in blocks[1:]:
        if len(b.writes) != 1 or any(v.iter_type != tirx.IterVar.DataPar for v in b.iter_vars):
            return None
        if _ints([v.dom.extent for v in b.iter_vars]) != o_shape:
            return None
        w = b.body if isinstance(b.body, tirx.BufferStore) else None
        if w is None or _ints(w.buffer.shape) != o_shape or _var_index(w.indices, list(b.iter_vars)) != list(range(len(o_shape))):
            return None
        epilogue.append(b.name_hint)
    return Pattern(block.name_hint, X, Y, O, () if batch else lead, M, N, K, transposed, tuple(epilogue), batch)


def _unravel(m, lead: tuple[int, ...], rows: int) -> list:
    """Row m of the folded M as indices into [lead..., rows]."""
    idx = [tirx.floormod(m, rows) if lead else m]
    rest = tirx.floordiv(m, rows) if lead else None
    for n, extent in enumerate(reversed(lead)):
        last = n == len(lead) - 1
        idx.insert(0, rest if last else tirx.floormod(rest, extent))
        rest = None if last else tirx.floordiv(rest, extent)
    return idx


def point(buf, indices) -> tirx.BufferRegion:
    """The one element `buf[indices]` as a region. The product's blocks declare their reads and
    writes of the function's buffers with it: TVMScript infers a block's regions from its own
    subscripts, not from the loads and stores built here in Python."""
    return tirx.BufferRegion(buf, [tvm.ir.Range.from_min_extent(i, 1) for i in indices])


def product(p: Pattern, cfg):
    """The product as the ladder's steps see it (A_pad, B_pad, C, C_pad over the padded sizes),
    reading and writing the function's own buffers: a PrimFunc without parameters whose body
    replaces the matmul block's loop nest."""
    M, N, K = p.M, p.N, p.K
    Mp, Np, Kp = padding.padded_shape(cfg, M, N, K)
    rows = M // math.prod(p.lead) if p.lead else M
    X, Y, O = p.X, p.Y, p.O

    def a_at(m, k):
        return tirx.BufferLoad(X, [*_unravel(m, p.lead, rows), k])

    def b_at(k, j):
        return tirx.BufferLoad(Y, [j, k] if p.transposed_b else [k, j])

    def o_at(m, j):
        return [*_unravel(m, p.lead, rows), j]

    @T.prim_func(s_tir=True, check_well_formed=False)
    def main():
        with T.sblock("root"):
            A_pad = T.sblock_alloc_buffer((Mp, Kp), "float32")
            B_pad = T.sblock_alloc_buffer((Kp, Np), "float32")
            C_acc = T.sblock_alloc_buffer((Mp, Np), "float32")
            for i, k in T.grid(Mp, Kp):
                with T.sblock("A_pad"):
                    vi, vk = T.axis.remap("SS", [i, k])
                    T.reads(point(X, a_at(T.min(vi, M - 1), T.min(vk, K - 1)).indices))
                    T.writes(A_pad[vi, vk])
                    A_pad[vi, vk] = T.if_then_else(vi < M and vk < K, a_at(T.min(vi, M - 1), T.min(vk, K - 1)),
                                                   T.float32(0))
            for k, j in T.grid(Kp, Np):
                with T.sblock("B_pad"):
                    vk, vj = T.axis.remap("SS", [k, j])
                    T.reads(point(Y, b_at(T.min(vk, K - 1), T.min(vj, N - 1)).indices))
                    T.writes(B_pad[vk, vj])
                    B_pad[vk, vj] = T.if_then_else(vk < K and vj < N, b_at(T.min(vk, K - 1), T.min(vj, N - 1)),
                                                   T.float32(0))
            for i, j, k in T.grid(Mp, Np, Kp):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C_acc[vi, vj] = T.float32(0)
                    C_acc[vi, vj] = C_acc[vi, vj] + A_pad[vi, vk] * B_pad[vk, vj]
            for i, j in T.grid(M, N):
                with T.sblock("C_pad"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads(C_acc[vi, vj])
                    T.writes(point(O, o_at(vi, vj)))
                    T.buffer_store(O, C_acc[vi, vj], o_at(vi, vj))

    return main


def batched_product(p: Pattern, cfg):
    """``product`` for a batched matmul: each block has the batch (the leading dimensions
    flattened) as its outermost axis, which the schedule binds to blockIdx.z (schedules/integration/batched.py);
    A_pad, B_pad and the accumulator are batch x (the padded M x K, K x N, M x N)."""
    M, N, K = p.M, p.N, p.K
    Mp, Np, Kp = padding.padded_shape(cfg, M, N, K)
    nb, X, Y, O = p.batches, p.X, p.Y, p.O

    def at(b):  # the flattened batch index as indices into the leading dimensions
        return _unravel(b, p.batch[:-1], p.batch[-1])

    def a_at(b, m, k):
        return tirx.BufferLoad(X, [*at(b), m, k])

    def b_at(b, k, j):
        return tirx.BufferLoad(Y, [*at(b), *([j, k] if p.transposed_b else [k, j])])

    @T.prim_func(s_tir=True, check_well_formed=False)
    def main():
        with T.sblock("root"):
            A_pad = T.sblock_alloc_buffer((nb, Mp, Kp), "float32")
            B_pad = T.sblock_alloc_buffer((nb, Kp, Np), "float32")
            C_acc = T.sblock_alloc_buffer((nb, Mp, Np), "float32")
            for b, i, k in T.grid(nb, Mp, Kp):
                with T.sblock("A_pad"):
                    vb, vi, vk = T.axis.remap("SSS", [b, i, k])
                    T.reads(point(X, a_at(vb, T.min(vi, M - 1), T.min(vk, K - 1)).indices))
                    T.writes(A_pad[vb, vi, vk])
                    A_pad[vb, vi, vk] = T.if_then_else(vi < M and vk < K, a_at(vb, T.min(vi, M - 1), T.min(vk, K - 1)),
                                                       T.float32(0))
            for b, k, j in T.grid(nb, Kp, Np):
                with T.sblock("B_pad"):
                    vb, vk, vj = T.axis.remap("SSS", [b, k, j])
                    T.reads(point(Y, b_at(vb, T.min(vk, K - 1), T.min(vj, N - 1)).indices))
                    T.writes(B_pad[vb, vk, vj])
                    B_pad[vb, vk, vj] = T.if_then_else(vk < K and vj < N, b_at(vb, T.min(vk, K - 1), T.min(vj, N - 1)),
                                                       T.float32(0))
            for b, i, j, k in T.grid(nb, Mp, Np, Kp):
                with T.sblock("C"):
                    vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
                    with T.init():
                        C_acc[vb, vi, vj] = T.float32(0)
                    C_acc[vb, vi, vj] = C_acc[vb, vi, vj] + A_pad[vb, vi, vk] * B_pad[vb, vk, vj]
            for b, i, j in T.grid(nb, M, N):
                with T.sblock("C_pad"):
                    vb, vi, vj = T.axis.remap("SSS", [b, i, j])
                    T.reads(C_acc[vb, vi, vj])
                    T.writes(point(O, [*at(vb), vi, vj]))
                    T.buffer_store(O, C_acc[vb, vi, vj], [*at(vb), vi, vj])

    return main


def _nest_of(stmt, name: str) -> bool:
    """Whether `stmt` is a loop nest around the block `name` (how Relax writes each block)."""
    while isinstance(stmt, tirx.For):
        stmt = stmt.body
    return isinstance(stmt, s_tir.SBlockRealize) and stmt.block.name_hint == name


def rewrite(func: tirx.PrimFunc, p: Pattern, cfg) -> tirx.PrimFunc:
    """`func` with its matmul's loop nest replaced by ``product``'s blocks."""
    root = func.body.block
    stmts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    new = (batched_product if p.batch else product)(p, cfg).body.block
    nests = list(new.body.seq) if isinstance(new.body, tirx.SeqStmt) else [new.body]
    at = [n for n, st in enumerate(stmts) if _nest_of(st, p.block)]
    if len(at) != 1:
        raise ConfigError(f"the matmul block {p.block!r} is not one loop nest of the root")
    body = tirx.SeqStmt(stmts[:at[0]] + nests + stmts[at[0] + 1:])
    block = s_tir.SBlock([], [], [], "root", body, None, list(root.alloc_buffers) + list(new.alloc_buffers),
                         list(root.match_buffers), root.annotations)
    return tirx.PrimFunc(func.params, s_tir.SBlockRealize([], True, block), func.ret_type, func.attrs)


def arch_of(target: Target) -> str | None:
    arch = target.attrs.get("arch") if target.attrs is not None else None
    return str(arch) if arch is not None else None


def rule_steps(M: int, N: int, K: int):
    """What the rule may choose from at M x N x K: steps that schedule a TensorIR block and
    need no lowering pass of the ladder's own."""
    return lambda s: s.schedules_a_block and s.builds_in_model(M, N, K)


def schedule(func: tirx.PrimFunc, p: Pattern, step, cfg) -> s_tir.Schedule:
    """`func` scheduled by `step` with `cfg`, its epilogue folded into the store."""
    from ..transforms import epilogue as epilogue_

    staged = padding.staged_operands(cfg, p.M, p.N, p.K)
    cfg = padding.effective_config(cfg, p.M, p.N, p.K)
    sch = s_tir.Schedule(rewrite(func, p, cfg))
    if p.batch:
        batched.bind_batch(sch, sch.get_sblock("C"))
    tiles = step.schedule_block(sch, sch.get_sblock("C"), padding.named_pads(sch), staged, cfg, p.N)
    # The elementwise blocks form a DAG (GELU reads the biased value twice): inline each but the
    # last into its consumers, so one block computes the whole epilogue from the product, then
    # fold that one into the store.
    for name in p.epilogue[:-1]:
        sch.compute_inline(sch.get_sblock(name))
    for name in p.epilogue[-1:]:
        block = sch.get_sblock(name)
        try:
            sch.reverse_compute_inline(block)
        except s_tir.ScheduleError:
            # Not foldable (e.g. behind split-K's reduction): under the store's thread loop, as
            # schedules/transforms/epilogue.py does; failing that, a kernel of its own.
            try:
                producers = sch.get_producers(block)
                if not producers:
                    raise s_tir.ScheduleError("no producer to go under")
                loops = sch.get_loops(producers[-1])
                bound = [lp for lp in loops if sch.get(lp).thread_binding is not None
                         and str(sch.get(lp).thread_binding.thread_tag).startswith("threadIdx")]
                sch.reverse_compute_at(block, bound[-1] if bound else tiles.thread_j)
            except s_tir.ScheduleError:
                epilogue_.separate_block(sch, block)
    return sch


class LadderMatmul(ScheduleRule):
    """dlight's interface to the ladder (the module's docstring says what it does)."""

    def __init__(self, precision: str = "fp32", gpu: str | None = None):
        if precision not in dispatch.MODEL_PRECISIONS:  # 16-bit models: issue 50
            raise ConfigError(f"precision must be one of {', '.join(dispatch.MODEL_PRECISIONS)} (a model's fp32 "
                              f"matmuls), got {precision!r}")
        self.precision, self.gpu = precision, gpu
        self.chosen: list[tuple[tuple[int, int, int], int, tuple[str, ...]]] = []  # (M, N, K), step, epilogue

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        if target.kind.name != "cuda" or not isinstance(func, tirx.PrimFunc):
            return None
        p = match(func)
        if p is None:
            return None
        arch = arch_of(target) or "sm_90"
        try:
            step, config = choose(p, self.precision, arch, self.gpu)
            sch = schedule(func, p, step, config)
        except (ConfigError, RuntimeError):  # a config or schedule TVM refuses: not for the ladder
            return None
        self.chosen.append(((p.M, p.N, p.K), step.number, p.epilogue))
        return sch


def choose(p: Pattern, precision: str, arch: str, gpu: str | None = None):
    """(step, config) for what ``match`` found: ``schedules.fastest``'s pick among the steps the
    rule may take; for a batched product, at the shape of the same thread blocks side by side
    (batches x M rows), with the batched config of that step (schedules/integration/batched.py)."""
    M = p.M * p.batches
    choice = dispatch.choose(M, p.N, p.K, precision, dispatch.family(arch), STEPS, gpu,
                             allow=rule_steps(M, p.N, p.K))
    if not p.batch:
        return choice.step, choice.config
    return choice.step, batched.config(choice.step, p.batches, p.M, p.N, p.K)


def build(func: tirx.PrimFunc, arch: str = "sm_90", precision: str = "fp32"):
    """`func` (a matmul the rule recognises, e.g. ``batched.batched_matmul(...)``) scheduled by
    the rule and compiled for `arch`; ConfigError, one line, where the rule declines it."""
    tgt = target(arch)
    sch = LadderMatmul(precision).apply(func, tgt, False)
    if sch is None:
        raise ConfigError("the ladder's rule does not take this function (schedules/integration/ladder_rule.py says what it takes)")
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIG):
        return tvm.compile(mod, target=tgt)
