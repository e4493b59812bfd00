"""A kernel's scratch in global memory, made a tensor of the model: safe to replay from a CUDA graph.

Some of the ladder's kernels write global memory that is neither an operand nor the result:
step 19's and 25's split copies (``A_pad``, ``B_pad``, ``Bt``, ``W``), step 28's fp16 halves,
the dlight rule's split-K partial sums (``C_acc_rf``, step 11). In TensorIR each is a
``T.alloc_buffer`` in global scope, which TVM lowers to ``TVMBackendAllocWorkspace``: a page of
the host thread's workspace pool, taken at the call and given back after it. Called one kernel at
a time that is harmless. A CUDA graph (``relax.backend.use_cuda_graph``) records the page's address
once and replays it on every call, while the pool goes on lending that page to later callers and,
when one asks for more than it holds, frees it for a larger one. The replayed kernel then writes
memory that is not its own: compute-sanitizer saw the fp32 block at 16 tokens write step 11's
partial sums 16 MiB + 2 KiB past a live allocation (H200, 2026-11-29), which went unnoticed in
one token count and faulted (illegal address) at the second count of a process
(results/nvidia-h200/evidence/model_graph_scratch.txt).

``LiftScratch`` makes each such buffer an extra output of its PrimFunc, and each ``call_tir`` of
the function asks for the extra outputs and keeps the first:

    lv = R.call_tir(step25_kernel, (x, w, bias), out_ty=R.Tensor((16, 3072)))
    # becomes
    lv_all = R.call_tir(step25_kernel, (x, w, bias), out_ty=[R.Tensor((16, 3072)), R.Tensor((16, 1024)), ...])
    lv = lv_all[0]

so the scratch is Relax's to plan, as any tensor whose life ends at the call (its storage reused
by later tensors); in a CUDA graph it is part of the graph's cached allocation, one address for
the life of the VM. Only buffers allocated at the top of a function (the root block's, or
``T.alloc_buffer`` statements at the top of a written-out kernel) with a static shape are lifted,
and only those the kernel names (the rest are dropped);
tests/test_scratch.py checks that a built model's host code takes nothing from the pool.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, PyExprVisitor, mutator, visitor
from tvm.s_tir import SBlock, SBlockRealize

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _is_global(buf) -> bool:
    return buf.scope() == "global"


def _static(buf) -> bool:
    return all(isinstance(d, tvm.tirx.IntImm) for d in buf.shape)


def top_statements(func):
    """(the root block or None, the statements at the top of the function's body): where a
    schedule (the root block's alloc_buffers) and a kernel written out (``T.alloc_buffer`` at the
    top of its body, an AllocBuffer statement) put what they allocate."""
    body = func.body
    root = body.block if isinstance(body, SBlockRealize) else None
    stmts = root.body if root is not None else body
    return root, list(stmts.seq) if isinstance(stmts, tvm.tirx.SeqStmt) else [stmts]


def global_scratch(func) -> list:
    """The global-scope buffers allocated at the top of `func` (what lowering would take from the
    workspace pool): the root block's, then those of AllocBuffer statements at the top."""
    root, stmts = top_statements(func)
    found = [b for b in root.alloc_buffers if _is_global(b)] if root is not None else []
    return found + [s.buffer for s in stmts if isinstance(s, tvm.tirx.AllocBuffer) and _is_global(s.buffer)]


def _seq(stmts):
    return stmts[0] if len(stmts) == 1 else tvm.tirx.SeqStmt(stmts)


def lift(func):
    """(func with its top-level global scratch of static shape as trailing parameters, the
    buffers lifted); the buffers are [] and func unchanged where it allocates none. A buffer the
    kernel never names is dropped, not lifted: a schedule's copies that this shape skips (step
    23's ``A_pad``, ``B_pad`` and ``Bt`` where its operands need no pad or transpose) would
    otherwise cost the model an allocation per call and their memory."""
    scratch = [b for b in global_scratch(func) if _static(b)]
    if not scratch:
        return func, []
    gone = lambda b: any(b.same_as(x) for x in scratch)  # noqa: E731
    root, stmts = top_statements(func)
    stmts = [s for s in stmts if not (isinstance(s, tvm.tirx.AllocBuffer) and gone(s.buffer))]
    body = _seq(stmts)
    named = tvm.tirx.analysis.undefined_vars(body)  # every access names its buffer (a Var here)
    lifted = [b for b in scratch if any(v.same_as(b) for v in named)]
    if root is not None:
        block = SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                       [b for b in root.alloc_buffers if not gone(b)], root.match_buffers, root.annotations)
        body = SBlockRealize(func.body.iter_values, func.body.predicate, block)
    return tvm.tirx.PrimFunc(list(func.params) + lifted, body, func.ret_type, func.attrs), lifted


@visitor
class _OtherUses(PyExprVisitor):
    """The GlobalVars a Relax function uses other than as the kernel of a ``call_tir``: a kernel
    reached another way (``call_tir_inplace``, a closure) keeps its signature, and its scratch."""

    def __init__(self):
        super().__init__()
        self.seen: set = set()

    def visit_call_(self, call):
        if not call.op.same_as(_CALL_TIR):
            return super().visit_call_(call)
        for arg in call.args[1:]:
            self.visit_expr(arg)

    def visit_global_var_(self, gv):
        self.seen.add(gv)


@mutator
class _AskForScratch(PyExprMutator):
    def __init__(self, mod, lifted: dict):
        super().__init__(mod)
        # A PrimFunc's GlobalVar carries its signature: each lifted function gets a new one (the
        # old is not in `mod`), and its calls are pointed at it.
        self.lifted = {old: (self.builder_.add_func(func, old.name_hint), outs) for old, (func, outs) in lifted.items()}

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(_CALL_TIR) or call.args[0] not in self.lifted:
            return call
        gv, scratch = self.lifted[call.args[0]]
        out = call.ty_args[0]
        outs = list(out.fields) if isinstance(out, relax.TupleType) else [out]
        everything = relax.Call(call.op, [gv, *call.args[1:]], call.attrs, [relax.TupleType(outs + scratch)])
        var = self.builder_.emit(everything)
        if isinstance(out, relax.TupleType):
            return relax.Tuple([relax.TupleGetItem(var, i) for i in range(len(outs))])
        return relax.TupleGetItem(var, 0)


@tvm.transform.module_pass(opt_level=0, name="LiftScratch")
class LiftScratch:
    """The pass (see the module's docstring). `only`: the names of the PrimFuncs to consider
    (None: every one). Run it after every PrimFunc is scheduled: before that, a global buffer may
    be an intermediate a schedule would still move into shared memory or registers."""

    def __init__(self, only=None):
        self.only = None if only is None else set(only)

    def transform_module(self, mod, ctx):
        other = _OtherUses()
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                other.visit_expr(func)
        lifted, dropped = {}, {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or (self.only is not None and gv.name_hint not in self.only):
                continue
            if gv in other.seen:
                continue
            new, bufs = lift(func)
            if bufs:
                lifted[gv] = (new, [relax.TensorType([int(d) for d in b.shape], b.dtype) for b in bufs])
            elif not new.same_as(func):
                dropped[gv] = new  # only unused scratch: the signature and the calls stay
        if not lifted and not dropped:
            return mod
        kept = {gv: dropped.get(gv, f) for gv, f in mod.functions_items() if gv not in lifted}
        rest = tvm.IRModule(kept, mod.attrs, mod.global_infos)
        rewriter = _AskForScratch(rest, lifted)
        for gv, func in rest.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        return rewriter.builder_.get()


__all__ = ["LiftScratch", "global_scratch", "lift", "top_statements"]
