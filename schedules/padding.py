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

Pure IR: no GPU, no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tvm import s_tir

VECTOR_WIDTHS = (4, 2, 1)


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


def effective_config(cfg, M: int, N: int, K: int):
    """The config a step is scheduled with for this shape: `cfg`, with `vector` narrowed by
    :func:`global_vector` where the config has one and the rule requires it."""
    names = {f.name for f in dataclasses.fields(cfg)}
    if "vector" not in names:
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
    return Padding(_block_or_none(sch, "A_pad"), _block_or_none(sch, "B_pad"), _block_or_none(sch, "C_pad"))


def named_pads(sch: s_tir.Schedule) -> Padding:
    """The pad blocks a computation wrote itself (named as pad_einsum names them)."""
    return Padding(_block_or_none(sch, "A_pad"), _block_or_none(sch, "B_pad"), _block_or_none(sch, "C_pad"))


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
    notes = []
    if needs_padding(cfg, M, N, K):
        notes.append("padded to " + "x".join(str(n) for n in padded_shape(cfg, M, N, K)))
    eff = effective_config(cfg, M, N, K)
    if eff is not cfg:
        notes.append(f"vector {eff.vector}")
    return ", ".join(notes)
