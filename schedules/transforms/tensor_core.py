"""The schedule transforms of the tensor-core steps (12-14), each written once.

The CUDA-core steps give every thread a micro-tile of C; here the unit is a warp. The matmul is
cut into 16 x 16 x 8 tiles, each ``blockize``d into one block that ``tensorize`` replaces with
two ``mma.sync.m16n8k8`` TF32 instructions (schedules/transforms/tensor_intrin.py). Around it:

- a thread block owns block_m x block_n of C, its warps warp_m x warp_n each (threadIdx.y is
  the warp, threadIdx.x the lane: the lane is bound inside the intrinsics);
- A and B are staged through shared memory block_k at a time, copied by all threads;
- per 8 k, each warp loads its A and B fragments from shared memory into registers and
  issues (warp_m / 16) x (warp_n / 16) tile products;
- C accumulates in registers, is stored to shared memory tile by tile, and written to global
  memory as coalesced float4 rows (predicated where a shape is padded).

16-bit inputs (a config with dtype fp16 or bf16): the tile is 16 x 16 x 16 (two
``mma.sync.m16n8k16``, fp32 accumulation), fragments come by ``ldmatrix`` (B by ``.trans``),
sizes count elements of the dtype, and the base computation's C_store (the rounding to the
dtype) is folded into the write-back (``round_to_dtype``): C stays fp32 in registers and in
the shared C tile, and is rounded as it is written to global memory.

Fragments are per-thread ``local`` buffers: ``transform_layout`` maps each 16 x 8 (or 8 x 16,
16 x 16) tile to the register of its owning lane (``assume_injective_transform``: the map
drops the lane, so it is not injective over the whole warp, which is exactly how the registers
are spread over the warp). TVM's "warp" scope, meant for this, does not lower in 0.27:
LowerWarpMemory looks for threadIdx.x inside the buffer's scope, and LiftThreadBinding has
already moved it above every allocation.

Pure IR: no GPU, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir

from ..config import DTYPES, ConfigError
from . import tensor_intrin as ti
from .cuda_core import Tiles, rasterize, source_transposed

WARP = ti.WARP


@dataclass
class TensorTiles(Tiles):
    """Tiles, plus the handles the tensor-core steps pass on. Of Tiles' own, ``k_step`` is the
    loop of 8-k steps inside a block_k slice and ``fragments`` the A and B register fragments."""

    outer: s_tir.SBlockRV | None = None  # the blockized 16 x 16 x 8 tile
    warp: s_tir.LoopRV | None = None  # threadIdx.y
    tile_i: s_tir.LoopRV | None = None  # 16 x 16 tiles of the warp's tile
    tile_j: s_tir.LoopRV | None = None
    output_shared: s_tir.SBlockRV | None = None  # C staged in shared memory
    output_fragment: s_tir.SBlockRV | None = None  # C registers -> shared
    init: s_tir.SBlockRV | None = None
    # Step 14's promote 2: the block adding each slice's partial sum into C's fp32 registers.
    promote: s_tir.SBlockRV | None = None


def tile_warps(sch: s_tir.Schedule, block: s_tir.SBlockRV, cfg) -> TensorTiles:
    """Cut i, j, k into 16 x 16 x 8 tiles, blockize one, and lay the tiles over blocks and warps.

    Loop order: block_i block_j warp | k_outer k_step | tile_i tile_j | the 16 x 16 x 8 tile.
    A block whose k is already cut into block_k slices (loops ko, i, j, kk: step 14's promote 2,
    where ko is a spatial axis of the block) keeps its ko as k_outer and tiles kk.
    """
    check_dtype(sch, block, cfg)
    tile_k = _tile_k(cfg)
    loops = sch.get_loops(block)
    sliced = len(loops) == 4
    if sliced:
        k_outer, i, j, k = loops
    else:
        i, j, k = loops
    i, ti_ = sch.split(i, [None, ti.TILE_M])
    j, tj_ = sch.split(j, [None, ti.TILE_N])
    k, tk_ = sch.split(k, [None, tile_k])
    sch.reorder(i, j, k, ti_, tj_, tk_)
    outer = sch.blockize(ti_)
    block_i, warp_i, tile_i = sch.split(i, [None, cfg.block_m // cfg.warp_m, cfg.warp_m // ti.TILE_M])
    block_j, warp_j, tile_j = sch.split(j, [None, cfg.block_n // cfg.warp_n, cfg.warp_n // ti.TILE_N])
    if sliced:  # kk's 8-k steps: block_k / 8 of them, already
        k_step = k
    else:
        k_outer, k_step = sch.split(k, [None, cfg.block_k // tile_k])
    sch.reorder(block_i, block_j, warp_i, warp_j, k_outer, k_step, tile_i, tile_j)
    block_i, block_j = rasterize(sch, block_i, block_j, cfg.raster)
    warp = sch.fuse(warp_i, warp_j)
    sch.bind(warp, "threadIdx.y")
    return TensorTiles(block, block_i, block_j, warp, warp, k_outer=k_outer, outer=outer, warp=warp,
                       k_step=k_step, tile_i=tile_i, tile_j=tile_j)


def _dtype(cfg) -> str:
    return getattr(cfg, "dtype", "fp32")


def _tile_k(cfg) -> int:
    return ti.geometry(_dtype(cfg))[0]


def check_dtype(sch: s_tir.Schedule, block: s_tir.SBlockRV, cfg) -> None:
    """ConfigError, one line, where the config's dtype is not the one of the block's inputs
    (a 16-bit config for fp32 inputs or the other way round)."""
    names = {v: k for k, v in DTYPES.items()}
    inputs = {str(r.source.dtype) for r in sch.get(block).reads} - {"float32"}
    got = names.get(next(iter(inputs)), "?") if inputs else "fp32"
    if got != _dtype(cfg):
        raise ConfigError(f"the config is for {_dtype(cfg)} inputs, the matmul's are {got}: "
                          f"pass dtype={_dtype(cfg)!r} or a config with dtype={got!r}")


def round_to_dtype(sch: s_tir.Schedule, tiles: "TensorTiles") -> "TensorTiles":
    """16-bit inputs: the base computation's block C_store (C = cast(dtype, C_acc)) folded into
    C's write-back, so each fp32 sum is rounded to the dtype as it leaves the shared C tile for
    global memory: no fp32 C_acc in global memory, no second pass. Where the shape is padded,
    C_store folds into C_pad, which padding.inline_padding folds into the same write-back."""
    sch.reverse_compute_inline(sch.get_sblock("C_store"))
    return tiles


def _spread_copy(sch: s_tir.Schedule, copy: s_tir.SBlockRV, warps: int, vector: int) -> None:
    """All threads copy a tile, a warp-contiguous `vector` floats per thread per round (one
    float per load, in the source's order, for a B stored N x K: transforms.cooperative_fetch)."""
    outer, inner = sch.get_loops(copy)[-2:]
    if source_transposed(sch, copy):
        sch.reorder(inner, outer)
        outer, inner, vector = inner, outer, 1
    fused = sch.fuse(outer, inner)
    _, ty, tx, vec = sch.split(fused, [None, warps, WARP, vector])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)


def _stage(sch: s_tir.Schedule, tiles: TensorTiles, cfg, consumer, read_index: int, operand: int) -> None:
    """One operand through shared memory for `consumer`, block_k per slice, copied by all
    threads, its rows padded by pad_a (A) or pad_b (B) floats."""
    copy = sch.cache_read(consumer, read_index, cfg.shared_scope)
    sch.compute_at(copy, tiles.k_outer)
    _spread_copy(sch, copy, cfg.warps, cfg.vector)
    pad, row = (cfg.pad_a, cfg.block_k) if operand == 0 else (cfg.pad_b, cfg.block_n)
    if pad:
        # Rows a whole number of 128-byte bank rounds apart, plus the pad: 32 floats, 64 halves.
        bank_round = 32 if _dtype(cfg) == "fp32" else 64
        sch.storage_align(copy, 0, axis=-2, factor=bank_round, offset=(row + pad) % bank_round)
    tiles.shared_copies.append(copy)


def stage_operands(sch: s_tir.Schedule, tiles: TensorTiles, cfg) -> TensorTiles:
    """A and B through shared memory, block_k per slice, rows padded by pad_a / pad_b floats."""
    for operand in (0, 1):
        _stage(sch, tiles, cfg, tiles.outer, operand, operand)
    return tiles


def _split_2d(sch: s_tir.Schedule, block: s_tir.SBlockRV, rows: int, cols: int):
    """Split a block's last two loops into (rows x cols) tiles; return the tile's first loop."""
    a, b = sch.get_loops(block)[-2:]
    a_out, a_in = sch.split(a, [None, rows])
    b_out, b_in = sch.split(b, [None, cols])
    sch.reorder(a_out, b_out, a_in, b_in)
    sch.unroll(a_out)
    sch.unroll(b_out)
    return a_in


def load_fragments(sch: s_tir.Schedule, tiles: TensorTiles, cfg, load_a: str, load_b: str) -> TensorTiles:
    """Per 8 k: each warp's A (warp_m x 8) and B (8 x warp_n) fragments, shared -> registers."""
    a_frag = sch.cache_read(tiles.outer, 0, "local")
    b_frag = sch.cache_read(tiles.outer, 1, "local")
    for frag in (a_frag, b_frag):
        sch.compute_at(frag, tiles.k_step)
    tile_k, a_fragment, b_fragment = ti.geometry(_dtype(cfg))
    a_tile = _split_2d(sch, a_frag, ti.TILE_M, tile_k)
    b_tile = _split_2d(sch, b_frag, tile_k, ti.TILE_N)
    sch.transform_layout(a_frag, ("write", 0), lambda i, k: (i // ti.TILE_M, k // tile_k,
                                                             a_fragment(i % ti.TILE_M, k % tile_k)[1]),
                         assume_injective_transform=True)
    sch.transform_layout(b_frag, ("write", 0), lambda k, n: (k // tile_k, n // ti.TILE_N,
                                                             b_fragment(k % tile_k, n % ti.TILE_N)[1]),
                         assume_injective_transform=True)
    ti.tensorize(sch, a_tile, load_a)
    ti.tensorize(sch, b_tile, load_b)
    tiles.fragments = [a_frag, b_frag]
    return tiles


def _split_fragment_layout(operand: int, rows: int, cols: int):
    """(row, col, part) of a split operand -> (tile row, tile col, register): big halves in
    registers 0-3, small in 4-7 (a closure: index maps take no default arguments)."""
    where = ti.a_fragment if operand == 0 else ti.b_fragment
    return lambda x, y, p: (x // rows, y // cols, p * ti.FRAG_AB + where(x % rows, y % cols)[1])


def split_fragments(sch: s_tir.Schedule, tiles: TensorTiles, cfg) -> TensorTiles:
    """Step 14: the split blocks (A_split, B_split: big and small halves of each operand)
    become the fragment loads, computed per 8 k at the warp and tensorized with a load that
    splits in registers; their input (A, B, padded) is staged through shared memory as in
    ``stage_operands``."""
    for name, operand, rows, cols, load in (
        ("A_split", 0, ti.TILE_M, ti.TILE_K, ti.SPLIT_LOAD_A[cfg.shared_scope]),
        ("B_split", 1, ti.TILE_K, ti.TILE_N, ti.SPLIT_LOAD_B[cfg.shared_scope]),
    ):
        split = sch.get_sblock(name)
        sch.set_scope(split, 0, "local")
        sch.compute_at(split, tiles.k_step)
        _stage(sch, tiles, cfg, split, 0, operand)
        r, c, part = sch.get_loops(split)[-3:]
        r_out, r_in = sch.split(r, [None, rows])
        c_out, c_in = sch.split(c, [None, cols])
        sch.reorder(r_out, c_out, r_in, c_in, part)
        sch.unroll(r_out)
        sch.unroll(c_out)
        sch.transform_layout(split, ("write", 0), _split_fragment_layout(operand, rows, cols),
                             assume_injective_transform=True)
        ti.tensorize(sch, r_in, load)
        tiles.fragments.append(split)
    return tiles


def _c_tile(i, j):
    """(row, col) of a warp's C -> (16 x 16 tile row, tile col, register of the owning lane)."""
    return i // ti.TILE_M, j // ti.TILE_N, ti.c_fragment(i % ti.TILE_M, j % ti.TILE_N)[1]


def accumulate_in_fragments(sch: s_tir.Schedule, tiles: TensorTiles, cfg) -> TensorTiles:
    """C in registers for the whole k loop; then registers -> shared -> global.

    The C tile goes through shared memory so each warp writes whole rows of C as float4s
    (the accumulator fragment holds pairs of columns per lane), and so padded shapes get
    their predicate on that one copy (schedules/transforms/padding.py). C's writer is the mma tile, or
    with step 14's promote 2 the per-slice add (``accumulate_per_slice``).
    """
    writer = tiles.outer if tiles.promote is None else tiles.promote
    output_shared = sch.cache_write(writer, 0, cfg.shared_scope)
    output_fragment = sch.cache_write(writer, 0, "local")
    sch.reverse_compute_at(output_fragment, tiles.warp)
    sch.reverse_compute_at(output_shared, tiles.warp)
    if cfg.pad_b:  # the C tile's rows, as written by the fragment store
        sch.storage_align(output_fragment, 0, axis=-2, factor=32, offset=(cfg.block_n + cfg.pad_b) % 32)
    _split_2d(sch, output_fragment, ti.TILE_M, ti.TILE_N)
    sch.transform_layout(output_fragment, ("read", 0), _c_tile, assume_injective_transform=True)
    fused = sch.fuse(*sch.get_loops(output_shared)[-2:])
    _, tx, vec = sch.split(fused, [None, WARP, cfg.vector])
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)
    tiles.output_shared, tiles.output_fragment = output_shared, output_fragment
    tiles.accumulator = output_fragment
    return tiles


def accumulate_per_slice(sch: s_tir.Schedule, tiles: TensorTiles, cfg) -> TensorTiles:
    """Step 14, promote 2: the mma accumulates one block_k slice into C_slice, and block
    "C_promote" adds each slice's partial sum to C (in fp32, on the CUDA cores).

    The tile block now writes C_slice[ko, i, j] (ko spatial: one partial sum per slice); it
    lives in registers in the mma's C layout, like C's own accumulator, and only for the slice
    being summed (the ko index compacts away). C_promote reduces over ko, which is the k_outer
    loop: computed at k_outer, each warp adds its slice partial right after the slice's last
    8-k step, then the registers are free for the next slice.
    """
    promote = sch.get_sblock("C_promote")
    # Under k_outer, after the k steps: the slice's partial sum is complete there, and each warp
    # needs only its own warp_m x warp_n of it (the loops TVM creates cover that region).
    sch.reverse_compute_at(promote, tiles.k_outer)
    # The mma's accumulator: registers of each lane, the tile's (i, j) in the mma's C layout
    # (as C's own in accumulate_in_fragments), so the add is register r + register r.
    sch.set_scope(tiles.outer, 0, "local")
    sch.transform_layout(promote, ("read", 0), lambda ko, i, j: (ko, *_c_tile(i, j)),
                         assume_injective_transform=True)
    tiles.promote = promote
    return tiles


def _zero_tiles(sch: s_tir.Schedule, block: s_tir.SBlockRV, loop: s_tir.LoopRV) -> s_tir.SBlockRV:
    """The tile block's accumulator zeroed before `loop` (its init decomposed there), the
    16 x 16 tiles unrolled and each zeroed by the FILL intrinsic; returns the init block."""
    init = sch.decompose_reduction(block, loop)
    for tile_loop in sch.get_loops(init)[-2:]:
        sch.unroll(tile_loop)
    ti.tensorize(sch, sch.get_loops(sch.get_child_blocks(init)[0])[-2], ti.FILL)
    return init


def _tensorize_promote(sch: s_tir.Schedule, tiles: TensorTiles) -> None:
    """promote 2: C_slice zeroed at each slice's start (before k_step), C zeroed once (before
    k_outer), and the per-slice C += C_slice as 8 fp32 adds per lane per 16 x 16 tile."""
    # Zero C_slice inside k_outer, before the slice's k steps: a fresh sum per slice (free:
    # ptxas turns the zero accumulators into RZ operands of the slice's first mma).
    _zero_tiles(sch, tiles.outer, tiles.k_step)
    # The add per 16 x 16 tile of the warp's C, the tiles unrolled (constant register indices).
    add_tile = _split_2d(sch, tiles.promote, ti.TILE_M, ti.TILE_N)
    # Zero C once, before the slices (the copied loops keep the tiles' unrolling).
    init = sch.decompose_reduction(tiles.promote, tiles.k_outer)
    ti.tensorize(sch, sch.get_loops(init)[-2], ti.FILL)
    ti.tensorize(sch, add_tile, ti.FRAG_ADD)
    tiles.init = init


def tensorize_tiles(sch: s_tir.Schedule, tiles: TensorTiles, cfg, mma: str) -> TensorTiles:
    """Zero the accumulators before the k loop, then replace the 16 x 16 x 8 tile, its zeroing
    and its store with the intrinsics (promote 2: and the slice sum's zeroing and add)."""
    if tiles.promote is not None:
        _tensorize_promote(sch, tiles)
    else:
        tiles.init = _zero_tiles(sch, tiles.outer, tiles.k_outer)
    ti.tensorize(sch, sch.get_loops(tiles.block)[-3], mma)
    ti.tensorize(sch, sch.get_loops(tiles.output_fragment)[-2], ti.STORE[cfg.shared_scope])
    sch.unroll(tiles.tile_i)
    sch.unroll(tiles.tile_j)
    tiles.block = tiles.outer  # the 16 x 16 x 8 block is now the intrinsic's; padding sees the tile
    return tiles


def async_pipeline(sch: s_tir.Schedule, tiles: TensorTiles, stages: int, fragment_buffers: int = 1) -> TensorTiles:
    """cp.async global -> shared, `stages` buffers, copies `stages - 1` slices ahead (step 7's
    idea on the tensor-core loop nest); the slice's k steps unrolled so fragment loads of the
    next 8 k can overlap the mma of this one.

    The k_outer body is [copy A, copy B, compute...]: one stage per statement, the copies in
    stage 0, the rest (the k steps; with promote 2 also the slice sum's zeroing before them and
    its add after) in stage `stages - 1`, in program order.

    fragment_buffers 2 (step 13 only: body [copy A, copy B, k steps]) pipelines the k-step loop
    too: its fragment loads (stage 0) run one 8-k step ahead of its mma (stage 1), in two
    register sets. TVM expands that inner pipeline first, so k_outer then holds five statements:
    copy A, copy B, the k steps' prologue (the slice's first fragments), their loop, their
    epilogue (the last mma). The prologue goes in stage `stages - 2`, placed after this slice's
    loop (order 0 1 3 2 4): the next slice's first fragments load before this slice's last mma,
    so no warp starts a slice waiting on shared memory."""
    body = sch.get(tiles.k_outer).body
    statements = len(body.seq) if isinstance(body, tvm.tirx.SeqStmt) else 1
    if statements < 3:
        raise ValueError(f"k_outer's body has {statements} statements; expected copy A, copy B, compute")
    if fragment_buffers == 2:
        if statements != 3:
            raise ValueError(f"fragment double buffering expects copy A, copy B, k steps; got {statements} statements")
        sch.annotate(tiles.k_step, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(tiles.k_step, "software_pipeline_order", [0, 1, 2])
        stage, order = [0, 0, stages - 2, stages - 1, stages - 1], [0, 1, 3, 2, 4]
    else:
        stage, order = [0, 0] + [stages - 1] * (statements - 2), list(range(statements))
    sch.annotate(tiles.k_outer, "software_pipeline_stage", stage)
    sch.annotate(tiles.k_outer, "software_pipeline_order", order)
    sch.annotate(tiles.k_outer, "software_pipeline_async_stages", [0])
    sch.unroll(tiles.k_step)
    return tiles
