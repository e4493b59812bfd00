"""Any M, N, K: pad the matmul to whole tiles, then inline the padding away.

A step's schedule splits i, j and k by its block tile (``block_m``, ``block_n`` and, from
step 3 on, ``block_k``). When a size is not a multiple of its tile, ``Step.schedule`` wraps
the step's own ``apply`` in two schedule calls, both TVM's own:

1. before ``apply``: ``pad_einsum`` pads the compute block to whole tiles. It adds producer
   blocks ``A_pad`` / ``B_pad`` (``if_then_else(in bounds, X[...], 0)``) and, when M or N is
   padded, a consumer block ``C_pad`` copying the padded result back into C. The step then
   schedules the padded compute block exactly as it schedules an exact one.
2. after ``apply``: ``compute_inline`` folds ``A_pad`` / ``B_pad`` into their consumers (the
   shared-memory or register copies), which become zero-filling, predicated loads; and
   ``C_pad`` folds into C's write-back: ``reverse_compute_inline`` into the step's own
   local -> global write-back where it has one (step 5 on), else ``reverse_compute_at`` under
   the thread's micro-tile with the padded tile moved to ``local`` (steps 1-4), which gives
   those steps a predicated write-back of their register tile. No padded buffer remains in
   global memory and no extra kernel runs.

Sizes the tiles divide are left alone: no pad block is created, so the IR and the CUDA are
identical to what the step generated before shape support (tests/test_shapes.py checks it),
and so is the speed at 512/1024/2048.

The vector rule, in one place (:func:`global_vector`): a ``vector``-wide load or store of a
row of A (along k), of B or of C (along n) is aligned only when the row length is a multiple
of ``vector``. So a step's ``vector`` is lowered to the largest of 4, 2, 1 (at most the
configured one) that divides both N and K; it is unchanged whenever 4 | N and 4 | K, so
shapes such as 1000 x 1500 x 700 keep their float4 copies (the predicate is per vector, as
TVM proves each float4 wholly in or out of bounds), and e.g. K = 2047 copies one float at a
time. One ``vector`` field drives all copies of a step, so the narrower width applies to its
shared -> register fragments too.

Staged padding (step 11's ``stage_pads`` 1, :func:`stage_padding`): the narrowing is what makes
odd shapes slow. At 2047^3 every global -> shared copy is a 4-byte predicated cp.async and
every fragment load a scalar (the kernel's SASS: 64 LDGSTS, 64 STS and 485 integer ops against
16 LDGSTS, no STS and 107 at 2048^3; measured 30.6 against 45.3 TFLOPS on an H100). So instead
of inlining it, a misaligned operand's pad block (A when K breaks the vector, B when N does)
becomes a kernel of its own that copies the operand into a padded, zero-filled global buffer
(A_pad [Mp, Kp], B_pad [Kp, Np], allocated by TVM like split-K's partials), and the matmul
reads those: it is the kernel of the aligned padded problem, full ``vector``, no predicate on
those copies. The price is one read and one write of the operand, and a launch each. An
operand whose rows are aligned keeps its inlined, predicated float4 copies (as 1000 x 1500 x
700 does); C keeps its predicated write-back, at the widest store its row length allows.
Where nothing is misaligned ``stage_pads`` changes nothing: the same IR as ``stage_pads`` 0.

Pure IR: no GPU, no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tvm import s_tir, tirx

# 8: the 16-bit tensor-core configs' 16-byte copies (8 halves); a 4-float vector never meets it.
VECTOR_WIDTHS = (8, 4, 2, 1)


def round_up(size: int, tile: int) -> int:
    return -(-size // tile) * tile


def block_tiles(cfg) -> tuple[int, int, int]:
    """The (i, j, k) tile a step splits the matmul by; 1 where it does not split (k in steps 1-2).

    With split-K (step 11's ``split_k``) K is cut into `split_k` chunks of whole block_k
    slices, so K pads to a multiple of split_k * block_k: the least padding that gives every
    chunk the same length (``split_k`` 1: as before)."""
    k_tile = getattr(cfg, "block_k", 1) * getattr(cfg, "split_k", 1)
    return (getattr(cfg, "block_m", 1), getattr(cfg, "block_n", 1), k_tile)


def padded_shape(cfg, M: int, N: int, K: int) -> tuple[int, int, int]:
    """M, N, K rounded up to whole tiles: the problem the step's schedule actually tiles."""
    bm, bn, bk = block_tiles(cfg)
    return round_up(M, bm), round_up(N, bn), round_up(K, bk)


def needs_padding(cfg, M: int, N: int, K: int) -> bool:
    return padded_shape(cfg, M, N, K) != (M, N, K)


def global_vector(vector: int, N: int, K: int) -> int:
    """The widest vector (<= `vector`) whose loads of A rows (length K) and of B and C rows
    (length N) stay aligned: 4 when 4 divides N and K, else 2 when 2 does, else 1."""
    for width in VECTOR_WIDTHS:
        if width <= vector and N % width == 0 and K % width == 0:
            return width
    return 1


def staged_operands(cfg, M: int, N: int, K: int) -> tuple[str, ...]:
    """The operands `cfg` stages at M x N x K (:func:`stage_padding`): with ``stage_pads`` 1,
    A where its rows (length K) are not whole vectors, B where its rows (length N) are not;
    () otherwise. Such a row length is never a multiple of the tile (the tile is whole
    vectors), so a staged operand always has a pad block. Aligned shapes stage nothing: staging
    an aligned operand would only add a copy, as its predicated float4 copies are full width."""
    if not getattr(cfg, "stage_pads", 0):
        return ()
    return tuple(name for name, row in (("A", K), ("B", N)) if row % cfg.vector)


def effective_config(cfg, M: int, N: int, K: int):
    """The config a step is scheduled with for this shape: `cfg`, with `vector` narrowed by
    :func:`global_vector` where the config has one and the rule requires it. Not where the
    config stages its misaligned operands: the matmul then reads aligned buffers only (the
    operands left inlined have aligned rows by definition of :func:`staged_operands`)."""
    names = {f.name for f in dataclasses.fields(cfg)}
    if "vector" not in names or staged_operands(cfg, M, N, K):
        return cfg
    # Step 11's k_threads modes choose their vector themselves: matrix-vector mode reads A's
    # rows and B's K x 1 column along K and requires vector | K (K itself pads to whole
    # passes); vector-matrix mode requires block_n | N and block_k | K. Nothing to narrow.
    if getattr(cfg, "k_threads", 1) > 1:
        return cfg
    width = global_vector(cfg.vector, N, K)
    return cfg if width == cfg.vector else dataclasses.replace(cfg, vector=width)


@dataclass
class Padding:
    """The blocks ``pad_einsum`` added; ``None`` where that operand was not padded."""

    a_pad: s_tir.SBlockRV | None
    b_pad: s_tir.SBlockRV | None
    c_pad: s_tir.SBlockRV | None


def _block_or_none(sch: s_tir.Schedule, name: str):
    try:
        return sch.get_sblock(name)
    except Exception:  # pad_einsum leaves operands it did not pad alone
        return None


def pad_to_tiles(sch: s_tir.Schedule, block: s_tir.SBlockRV, cfg, M: int, N: int, K: int) -> Padding | None:
    """Pad the compute block to whole tiles (before the step's apply); None when they divide."""
    if not needs_padding(cfg, M, N, K):
        return None
    bm, bn, bk = block_tiles(cfg)
    sch.pad_einsum(block, [bm if M % bm else 1, bn if N % bn else 1, bk if K % bk else 1])
    c_pad = _block_or_none(sch, "C_pad")
    if c_pad is None:  # 16-bit inputs: the block writes C_acc (fp32), so its pad is C_acc_pad
        c_pad = _block_or_none(sch, "C_acc_pad")
    return Padding(_block_or_none(sch, "A_pad"), _block_or_none(sch, "B_pad"), c_pad)


def named_pads(sch: s_tir.Schedule) -> Padding:
    """The pad blocks a computation wrote itself (named as pad_einsum names them)."""
    return Padding(_block_or_none(sch, "A_pad"), _block_or_none(sch, "B_pad"), _block_or_none(sch, "C_pad"))


# Threads per block of a staging kernel: one element per thread (below).
STAGE_THREADS = 256


def stage_padding(sch: s_tir.Schedule, padding: Padding | None, staged: tuple[str, ...], N: int) -> Padding | None:
    """Give the pad blocks of the `staged` operands ("A", "B") kernels of their own (after the
    step's apply, before :func:`inline_padding`); returns the padding left to inline.

    A staged pad block stays a producer writing its padded global buffer, so the matmul's
    copies read A_pad / B_pad: rows of whole vectors, every tile in bounds, hence full-width,
    unpredicated cp.async. The block's loops are fused and split over blockIdx.x x
    ``STAGE_THREADS`` threads, one element per thread, consecutive threads on consecutive
    elements of a row: both the read of the operand and the write of its copy are coalesced.
    Not vectorized: a misaligned operand's rows do not start on 16 bytes, so no float4 of it
    can be loaded; coalescing is what a copy needs.

    C is not staged (a copy-out kernel would move M x N twice more); its pad block is still
    folded into the write-back by :func:`inline_padding`, predicated. But the write-back is
    vectorized by the config's full ``vector`` now, and a float4 store into a row whose length
    is not a multiple of 4 is misaligned (the kernel faults). TVM 0.27's vectorizer happens to
    fall back to a serial scalar loop here (the bounds predicate differs per lane), but the
    store width should be the schedule's decision, not a fallback's: :func:`narrow_vectors`
    cuts it to the widest store N allows (float2 where N is even, unrolled scalars where odd).
    """
    if padding is None or not staged:
        return padding
    left = dataclasses.replace(padding)
    for name in staged:
        pad = padding.a_pad if name == "A" else padding.b_pad
        blocks, thread = sch.split(sch.fuse(*sch.get_loops(pad)), [None, STAGE_THREADS])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
        setattr(left, f"{name.lower()}_pad", None)
    if padding.c_pad is not None:
        for producer in sch.get_producers(padding.c_pad):
            narrow_vectors(sch, producer, N)
    return left


def narrow_vectors(sch: s_tir.Schedule, block: s_tir.SBlockRV, row_length: int) -> None:
    """Cut every vectorized loop of `block` (a store into rows of `row_length` floats) to the
    widest vector that stays aligned: the loop is split, the outer part unrolled, the inner
    vectorized (or all of it unrolled, for one float). Loops already narrow enough stay as
    they are (so this is a no-op wherever the vector was already narrowed)."""
    for loop in sch.get_loops(block):
        if sch.get(loop).kind != tirx.ForKind.VECTORIZED:
            continue
        extent = int(sch.get(loop).extent)
        width = next(w for w in VECTOR_WIDTHS if w <= extent and extent % w == 0 and row_length % w == 0)
        if width == extent:
            continue
        if width == 1:
            sch.unroll(loop)
        else:
            outer, inner = sch.split(loop, [None, width])
            sch.unroll(outer)
            sch.vectorize(inner)


def inline_padding(sch: s_tir.Schedule, padding: Padding | None, block: s_tir.SBlockRV, thread_loop) -> None:
    """Fold the pad blocks into the scheduled kernel (after the step's apply).

    `block` is the compute block, `thread_loop` the innermost loop that is still per thread
    (``Tiles.thread_j``), under which C's write-back goes when the step has none of its own.
    """
    if padding is None:
        return
    for pad in (padding.a_pad, padding.b_pad):
        if pad is not None:
            sch.compute_inline(pad)  # zero-filling, predicated loads in the copies
    if padding.c_pad is None:
        return
    producers = sch.get_producers(padding.c_pad)
    if any(sch.get(p).same_as(sch.get(block)) for p in producers):
        # No write-back stage yet (steps 1-4): C_pad is the accumulator itself. Move its
        # copy-out under the thread's micro-tile and the padded tile into registers.
        sch.reverse_compute_at(padding.c_pad, thread_loop)
        sch.set_scope(block, 0, "local")
    else:
        sch.reverse_compute_inline(padding.c_pad)  # predicated stores in the write-back


def describe(cfg, M: int, N: int, K: int) -> str:
    """One phrase on what shape support does to this config at M x N x K ('' when nothing)."""
    if hasattr(cfg, "wgmma_n"):
        # The Hopper rungs (schedules/transforms/wgmma.py): TMA zero-fills the tiles' ragged edges; only
        # rows that are not 16-byte strided need a padded copy.
        copies = [name for name, size in (("A", K), ("B", N if cfg.register_a else 0)) if size % 4]
        return " and ".join(copies) + " copied with rows padded to 16 bytes" if copies else ""
    notes = []
    if needs_padding(cfg, M, N, K):
        notes.append("padded to " + "x".join(str(n) for n in padded_shape(cfg, M, N, K)))
    staged = staged_operands(cfg, M, N, K)
    if staged:
        notes.append(", ".join(staged) + (" staged to aligned copies" if len(staged) > 1
                                          else " staged to an aligned copy"))
    eff = effective_config(cfg, M, N, K)
    if eff is not cfg:
        notes.append(f"vector {eff.vector}")
    return ", ".join(notes)
