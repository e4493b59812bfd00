"""The schedule transforms the steps are made of, each written once.

Every function takes a ``tvm.s_tir.Schedule`` and handles into it, rewrites the IR, and
returns new handles. No GPU, no I/O: the steps compose these, one new idea per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm import s_tir


@dataclass
class Tiles:
    """Handles a step passes to the next: the compute block and its loop nest.

    Loop order, outermost first: ``block_i block_j thread_i thread_j k... micro_i micro_j``.
    ``k`` is one loop until step 3 splits it into ``k_outer`` (over block_k slices) and
    ``k_inner``.
    """

    block: s_tir.SBlockRV
    block_i: s_tir.LoopRV
    block_j: s_tir.LoopRV
    thread_i: s_tir.LoopRV
    thread_j: s_tir.LoopRV
    k_outer: s_tir.LoopRV
    k_inner: s_tir.LoopRV | None = None
    micro_i: s_tir.LoopRV | None = None
    micro_j: s_tir.LoopRV | None = None
    # Where the accumulator's zero-init is hoisted to (decompose_reduction), if anywhere.
    init_at: s_tir.LoopRV | None = None
    shared_copies: list = field(default_factory=list)
    accumulator: s_tir.SBlockRV | None = None


def bind_grid(sch: s_tir.Schedule, block_i, block_j, thread_i, thread_j) -> None:
    """blockIdx.x walks N so consecutive blocks share the same rows of A."""
    sch.bind(block_i, "blockIdx.y")
    sch.bind(block_j, "blockIdx.x")
    sch.bind(thread_i, "threadIdx.y")
    sch.bind(thread_j, "threadIdx.x")


def tile_grid(sch: s_tir.Schedule, block: s_tir.SBlockRV, block_m: int, block_n: int) -> Tiles:
    """Split i, j over a grid of block_m x block_n thread blocks, one C element per thread."""
    i, j, k = sch.get_loops(block)
    block_i, thread_i = sch.split(i, [None, block_m])
    block_j, thread_j = sch.split(j, [None, block_n])
    sch.reorder(block_i, block_j, thread_i, thread_j, k)
    bind_grid(sch, block_i, block_j, thread_i, thread_j)
    return Tiles(block, block_i, block_j, thread_i, thread_j, k_outer=k)


def tile_registers(
    sch: s_tir.Schedule, block: s_tir.SBlockRV, block_m: int, block_n: int, thread_m: int, thread_n: int
) -> Tiles:
    """Two-level split: each thread owns a thread_m x thread_n micro-tile of C.

    k sits outside the micro-tile, so each k step loads thread_m + thread_n operands and does
    thread_m * thread_n FMAs. The zero-init is hoisted out of k and the micro-tile unrolled,
    which lets nvcc keep the whole tile in registers across the k loop.
    """
    i, j, k = sch.get_loops(block)
    block_i, thread_i, micro_i = sch.split(i, [None, block_m // thread_m, thread_m])
    block_j, thread_j, micro_j = sch.split(j, [None, block_n // thread_n, thread_n])
    sch.reorder(block_i, block_j, thread_i, thread_j, k, micro_i, micro_j)
    bind_grid(sch, block_i, block_j, thread_i, thread_j)
    sch.unroll(micro_i)
    sch.unroll(micro_j)
    return Tiles(block, block_i, block_j, thread_i, thread_j, k_outer=k,
                 micro_i=micro_i, micro_j=micro_j, init_at=k)


def stage_in_shared(sch: s_tir.Schedule, tiles: Tiles, block_k: int) -> Tiles:
    """Walk K in block_k slices; copy each slice of A and B to shared memory once per block.

    After compute_at, every thread of the block still runs the whole copy loop itself;
    sharing that work out is the next step's idea.
    """
    k_outer, k_inner = sch.split(tiles.k_outer, [None, block_k])
    copies = []
    for operand in (0, 1):  # A, B
        copy = sch.cache_read(tiles.block, operand, "shared")
        sch.compute_at(copy, k_outer)
        copies.append(copy)
    tiles.k_outer, tiles.k_inner = k_outer, k_inner
    tiles.init_at = k_outer
    tiles.shared_copies = copies
    return tiles


def cooperative_fetch(sch: s_tir.Schedule, copy: s_tir.SBlockRV, threads_m: int, threads_n: int, vector: int) -> None:
    """Spread one shared-memory copy over all the block's threads, `vector` floats per load.

    The tile's two loops are fused and split as [threadIdx.y, threadIdx.x, rounds, vector]:
    each thread copies one contiguous run of rounds x vector floats, and consecutive threads
    take consecutive runs, so a warp reads one contiguous stretch of global memory. Keeping
    each thread's elements contiguous is also what lets step 6 stage them in a few registers.
    """
    fused = sch.fuse(*sch.get_loops(copy)[-2:])
    ty, tx, _, vec = sch.split(fused, [threads_m, threads_n, None, vector])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)


def accumulate_in_registers(sch: s_tir.Schedule, tiles: Tiles, vector: int) -> Tiles:
    """Explicit register tiles: C accumulates in `local`; A and B fragments come from shared.

    C's micro-tile gets a local buffer written back once per thread (as float4s). The inner
    k loop is split into runs of `vector`; per run each thread copies a thread_m x vector
    fragment of A and a vector x thread_n fragment of B from shared into registers and does
    the outer products from there. A's rows are contiguous along k and B's along n, so both
    fragments load as float4s: a quarter of the shared-memory instructions of scalar reads.
    """
    acc = sch.cache_write(tiles.block, 0, "local")
    sch.reverse_compute_at(acc, tiles.thread_j)
    _vectorize_innermost(sch, acc, vector)
    k_run, k_step = sch.split(tiles.k_inner, [None, vector])
    for operand in (0, 1):
        fragment = sch.cache_read(tiles.block, operand, "local")
        sch.compute_at(fragment, k_run)
        _vectorize_innermost(sch, fragment, vector)
    tiles.k_inner = k_run
    tiles.accumulator = acc
    return tiles


def _vectorize_innermost(sch: s_tir.Schedule, block: s_tir.SBlockRV, vector: int) -> None:
    """Vectorize the innermost loop of a copy when it is contiguous and splits into vectors."""
    loop = sch.get_loops(block)[-1]
    extent = sch.get(loop).extent
    if vector > 1 and int(extent) % vector == 0 and int(extent) > 1:
        _, vec = sch.split(loop, [None, vector])
        sch.vectorize(vec)


def prefetch_pipeline(sch: s_tir.Schedule, tiles: Tiles, threads_m: int, threads_n: int, vector: int) -> Tiles:
    """Double-buffer through registers: load slice t+1 from global while slice t is multiplied.

    Each shared copy is split in two (``cache_read`` to ``local``): global -> registers, then
    registers -> shared, both spread over the threads like the copy itself. The k_outer body
    is [A->reg, reg->A_shared, B->reg, reg->B_shared, compute]; the software pipeline puts
    the copies one iteration ahead of the math (stages 0,0,0,0,1) and orders the body as
    loads, compute, stores, so the global loads of the next slice are in flight during the
    FMAs of this one, and only their arrival in shared memory waits for them.
    """
    for copy in tiles.shared_copies:
        staging = sch.cache_read(copy, 0, "local")
        sch.compute_at(staging, tiles.k_outer)
        cooperative_fetch(sch, staging, threads_m, threads_n, vector)
    sch.annotate(tiles.k_outer, "software_pipeline_stage", [0, 0, 0, 0, 1])
    sch.annotate(tiles.k_outer, "software_pipeline_order", [0, 3, 1, 4, 2])
    return tiles


def hoist_init(sch: s_tir.Schedule, tiles: Tiles) -> None:
    """Zero the accumulator once, before the reduction loop, instead of `if k == 0` inside it."""
    if tiles.init_at is not None:
        sch.decompose_reduction(tiles.block, tiles.init_at)
