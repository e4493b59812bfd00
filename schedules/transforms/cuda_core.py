"""The schedule transforms the steps are made of, each written once.

Every function takes a ``tvm.s_tir.Schedule`` and handles into it, rewrites the IR, and
returns new handles. No GPU, no I/O: the steps compose these, one new idea per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tvm import s_tir, tirx


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
    # Step 5's shared -> register copies of A and B, and the k loop inside ``k_inner`` that
    # one fragment load serves (``vector`` k values per load until step 8 transposes A).
    fragments: list = field(default_factory=list)
    k_step: s_tir.LoopRV | None = None


def bind_grid(sch: s_tir.Schedule, block_i, block_j, thread_i, thread_j) -> None:
    """blockIdx.x walks N so consecutive blocks share the same rows of A."""
    sch.bind(block_i, "blockIdx.y")
    sch.bind(block_j, "blockIdx.x")
    sch.bind(thread_i, "threadIdx.y")
    sch.bind(thread_j, "threadIdx.x")


def tile_grid(sch: s_tir.Schedule, block: s_tir.SBlockRV, block_m: int, block_n: int) -> Tiles:
    """Split i, j over a grid of block_m x block_n thread blocks, one C element per thread."""
    i, j, k = sch.get_loops(block)[-3:]  # the last three: a batch (schedules/integration/batched.py) is outside
    block_i, thread_i = sch.split(i, [None, block_m])
    block_j, thread_j = sch.split(j, [None, block_n])
    sch.reorder(block_i, block_j, thread_i, thread_j, k)
    bind_grid(sch, block_i, block_j, thread_i, thread_j)
    return Tiles(block, block_i, block_j, thread_i, thread_j, k_outer=k)


def tile_registers(
    sch: s_tir.Schedule, block: s_tir.SBlockRV, block_m: int, block_n: int, thread_m: int, thread_n: int,
    warp_m: int | None = None, raster: int = 1,
) -> Tiles:
    """Two-level split: each thread owns a thread_m x thread_n micro-tile of C.

    k sits outside the micro-tile, so each k step loads thread_m + thread_n operands and does
    thread_m * thread_n FMAs. The zero-init is hoisted out of k and the micro-tile unrolled,
    which lets nvcc keep the whole tile in registers across the k loop.

    ``warp_m`` and ``raster`` are step 9's thread and block mapping (see ``map_warps`` and
    ``rasterize``). They are applied here, with the tiling, because the thread loops must be
    bound before step 3's ``compute_at``: that is what makes a shared copy cover the whole
    block's tile rather than one thread's.
    """
    # The last three: a split-K block (step 11) has its K-chunk loop outside, bound to blockIdx.z.
    i, j, k = sch.get_loops(block)[-3:]
    block_i, thread_i, micro_i = sch.split(i, [None, block_m // thread_m, thread_m])
    block_j, thread_j, micro_j = sch.split(j, [None, block_n // thread_n, thread_n])
    sch.reorder(block_i, block_j, thread_i, thread_j, k, micro_i, micro_j)
    thread_i, thread_j = map_warps(sch, thread_i, thread_j, warp_m)
    block_i, block_j = rasterize(sch, block_i, block_j, raster)
    sch.unroll(micro_i)
    sch.unroll(micro_j)
    return Tiles(block, block_i, block_j, thread_i, thread_j, k_outer=k,
                 micro_i=micro_i, micro_j=micro_j, init_at=k)


def map_warps(sch: s_tir.Schedule, thread_i, thread_j, warp_m: int | None):
    """Warp tiling: a warp is warp_m x (32 / warp_m) threads of the grid, not 32 of one row.

    A warp's fragment loads then touch warp_m distinct rows of A and 32 / warp_m distinct
    columns of B, and threads reading the same element share one shared-memory access
    (broadcast): 4 x 8 threads read 4 + 8 distinct float4s where a 2 x 16 warp reads 2 + 16.
    Bound as threadIdx.y = warp, threadIdx.x = lane.
    """
    if warp_m is None:
        sch.bind(thread_i, "threadIdx.y")
        sch.bind(thread_j, "threadIdx.x")
        return thread_i, thread_j
    warp_i, lane_i = sch.split(thread_i, [None, warp_m])
    warp_j, lane_j = sch.split(thread_j, [None, 32 // warp_m])
    sch.reorder(warp_i, warp_j, lane_i, lane_j)
    warp = sch.fuse(warp_i, warp_j)
    lane = sch.fuse(lane_i, lane_j)
    sch.bind(warp, "threadIdx.y")
    sch.bind(lane, "threadIdx.x")
    return warp, lane


def rasterize(sch: s_tir.Schedule, block_i, block_j, raster: int):
    """Launch blocks in column groups `raster` blocks wide, down all block rows, so blocks
    running at the same time share B's columns (and A's rows) in L2. raster=1: row-major."""
    # A group wider than the grid, or not dividing it, would launch idle blocks.
    raster = math.gcd(raster, int(sch.get(block_j).extent))
    if raster == 1:
        sch.bind(block_i, "blockIdx.y")
        sch.bind(block_j, "blockIdx.x")
        return block_i, block_j
    group, within = sch.split(block_j, [None, raster])
    sch.reorder(group, block_i, within)
    blocks = sch.fuse(group, block_i, within)
    sch.bind(blocks, "blockIdx.x")
    return blocks, blocks


def stage_in_shared(sch: s_tir.Schedule, tiles: Tiles, block_k: int, scope: str = "shared") -> Tiles:
    """Walk K in block_k slices; copy each slice of A and B to shared memory once per block.

    After compute_at, every thread of the block still runs the whole copy loop itself;
    sharing that work out is the next step's idea.
    """
    k_outer, k_inner = sch.split(tiles.k_outer, [None, block_k])
    copies = []
    for operand in (0, 1):  # A, B
        copy = sch.cache_read(tiles.block, operand, scope)
        sch.compute_at(copy, k_outer)
        copies.append(copy)
    tiles.k_outer, tiles.k_inner = k_outer, k_inner
    tiles.init_at = k_outer
    tiles.shared_copies = copies
    return tiles


def cooperative_fetch(sch: s_tir.Schedule, copy: s_tir.SBlockRV, threads_m: int, threads_n: int, vector: int,
                      rounds_outer: bool = False) -> None:
    """Spread one shared-memory copy over all the block's threads, `vector` floats per load.

    The tile's two loops are fused and split as [threadIdx.y, threadIdx.x, rounds, vector]:
    each thread copies one contiguous run of rounds x vector floats, and consecutive threads
    take consecutive runs, so a warp reads one contiguous stretch of global memory. Keeping
    each thread's elements contiguous is also what lets step 6 stage them in a few registers.
    With ``rounds_outer`` (step 7 on, where cp.async needs no staging registers) the split is
    [rounds, threadIdx.y, threadIdx.x, vector]: each single load instruction of a warp then
    covers 32 consecutive float4s, 512 contiguous bytes.
    """
    outer, inner = sch.get_loops(copy)[-2:]
    if source_transposed(sch, copy):
        # B stored N x K (nn.Linear's weight): the tile's rows run along N in shared memory but
        # along K in global memory. Walk the tile in the source's order, one float per load, so
        # consecutive threads read consecutive floats; a float4 here would gather four rows, and
        # TVM 0.27's cp.async injection takes a strided vector for a contiguous 16 bytes (it
        # reads the ramp's base and ignores its stride): wrong data, or a misaligned-address fault.
        sch.reorder(inner, outer)
        outer, inner = inner, outer
        vector, rounds_outer = 1, True
    fused = sch.fuse(outer, inner)
    if rounds_outer:
        _, ty, tx, vec = sch.split(fused, [None, threads_m, threads_n, vector])
    else:
        ty, tx, _, vec = sch.split(fused, [threads_m, threads_n, None, vector])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)


def source_transposed(sch: s_tir.Schedule, copy: s_tir.SBlockRV) -> bool:
    """Whether the global memory behind a shared copy is contiguous along the tile's outer
    axis, not its inner one: its producer (the operand's pad block, inlined into the copy later)
    reads a function parameter whose last index does not follow the block's last axis."""
    for producer in sch.get_producers(copy):
        block = sch.get(producer)
        if len(block.iter_vars) < 2:
            continue
        last, second = block.iter_vars[-1].var, block.iter_vars[-2].var
        for read in block.reads:
            if read.source.scope() != "global":
                continue
            used = set(tirx.analysis.undefined_vars(read.region[-1].min))
            if last not in used and second in used:
                return True
    return False


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
        tiles.fragments.append(fragment)
    tiles.k_inner, tiles.k_step = k_run, k_step
    tiles.accumulator = acc
    return tiles


def _vectorize_innermost(sch: s_tir.Schedule, block: s_tir.SBlockRV, vector: int) -> None:
    """Vectorize the innermost loop of a copy (ignoring loops of extent 1) when it is
    contiguous and splits into vectors."""
    loops = [l for l in sch.get_loops(block) if int(sch.get(l).extent) > 1]
    if not loops:
        return
    loop = loops[-1]
    if vector > 1 and int(sch.get(loop).extent) % vector == 0:
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


def async_copy_pipeline(sch: s_tir.Schedule, tiles: Tiles, stages: int) -> Tiles:
    """cp.async multi-stage pipeline: copies global -> shared run `stages - 1` slices ahead.

    The k_outer body is [A->shared, B->shared, compute]; stages [0, 0, stages-1] keep
    `stages` versions of each shared buffer, and ``software_pipeline_async_stages`` [0]
    turns the copies of stage 0 into cp.async (16-byte, with pass config
    ``tirx.use_async_copy``) with one commit group per slice and a ``cp.async.wait_group``
    before each slice is used. The copies skip registers altogether.
    """
    sch.annotate(tiles.k_outer, "software_pipeline_stage", [0, 0, stages - 1])
    sch.annotate(tiles.k_outer, "software_pipeline_order", [0, 1, 2])
    sch.annotate(tiles.k_outer, "software_pipeline_async_stages", [0])
    return tiles


def interleave_by_thread(x, per_thread: int, threads: int, tile: int):
    """Position in shared memory of element ``x`` of a ``tile``-long row whose elements are
    read ``per_thread`` at a time by ``threads`` threads (thread g reads ``g * per_thread ..``).

    Thread g's float4 number h goes to ``h * 4 * threads + 4 * g``: the threads' h-th float4s
    become contiguous, so a quarter-warp's float4 loads cover 128 consecutive bytes (all 32
    banks once). A thread's run of 4 floats stays together, so 16-byte copies and loads survive.
    With at most 4 floats (or not whole float4s) per thread there is nothing to interleave.
    """
    if per_thread <= 4 or per_thread % 4:
        return x % tile
    return (x % per_thread) // 4 * (4 * threads) + (x % tile) // per_thread * 4 + x % 4


def conflict_free_layout(sch: s_tir.Schedule, tiles: Tiles, block_m: int, block_n: int, block_k: int,
                         thread_m: int, thread_n: int, pad_a: int, transpose_a: bool = False,
                         vector: int = 4) -> Tiles:
    """Lay the shared tiles out so each warp's fragment loads fall in distinct banks.

    B (block_k x block_n): columns are interleaved by thread (``interleave_by_thread``).
    A, m-major (``transpose_a`` False, block_m x block_k): a warp reads row
    ``g * thread_m + r`` of several threads g at once, rows thread_m apart and so (block_k a
    multiple of 8) in the same banks. Storing row m at
    ``(m % thread_m) * threads_m + m // thread_m`` puts those rows next to each other, and
    ``pad_a`` extra floats per row (``storage_align``) shift neighbouring rows by a different
    16-byte bank group. Leading (batch) dimensions of a batched tile pass through every map.
    A, k-major (``transpose_a`` True, block_k x block_m): A is stored transposed and
    interleaved like B. One k step's A fragment is then thread_m contiguous floats (float4
    loads along m), so fragments are loaded per k step instead of per run of 4: thread_m +
    thread_n registers instead of 4 x that, which is what lets 8 x 8 micro-tiles fit in 128
    registers. The price: A's global rows run along k, so its cp.async copies become 4-byte
    scalars (a thread's 4 floats go to 4 shared rows); ``pad_a`` pads the k rows. Measured
    slower than m-major at every size (step 8's docstring), so it is not the default.
    """
    threads_m, threads_n = block_m // thread_m, block_n // thread_n
    a_copy, b_copy = tiles.shared_copies
    if transpose_a:
        # The copy's 16-byte vector lands in 4 different shared rows: unroll it into scalars.
        sch.unroll(sch.get_loops(a_copy)[-1])
        sch.transform_layout(
            a_copy, ("write", 0),
            lambda *lead, m, k: (*lead, m // block_m, k, interleave_by_thread(m, thread_m, threads_m, block_m)),
        )
        # Fragments of one k step (not a run of 4): float4s along m (A) and n (B).
        for fragment in tiles.fragments:
            sch.compute_at(fragment, tiles.k_step)
            _vectorize_innermost(sch, fragment, vector)
    else:
        sch.transform_layout(
            a_copy, ("write", 0),
            lambda *lead, m, k: (*lead, m // block_m, (m % thread_m) * threads_m + (m % block_m) // thread_m, k),
        )
    if thread_n > 4:  # a thread reads one float4 per row when thread_n == 4: nothing to permute
        sch.transform_layout(
            b_copy, ("write", 0),
            lambda *lead, k, n: (*lead, n // block_n, k, interleave_by_thread(n, thread_n, threads_n, block_n)),
        )
    if pad_a:
        # Row stride = row length + pad_a (mod 32 floats, one pass over the banks).
        row = block_m if transpose_a else block_k
        rank = len(sch.get(a_copy).writes[0].source.shape)  # 3, or 4 with a batch (schedules/integration/batched.py)
        sch.storage_align(a_copy, 0, axis=rank - 2, factor=32, offset=(row + pad_a) % 32)
    return tiles


def unroll_k_slice(sch: s_tir.Schedule, tiles: Tiles) -> Tiles:
    """Unroll the loop over a slice's k runs, so fragment loads of run r + 1 can be scheduled
    by nvcc among the FMAs of run r (and their shared addresses become constants)."""
    sch.unroll(tiles.k_inner)
    return tiles



def split_k_rfactor(sch: s_tir.Schedule, block: s_tir.SBlockRV, split: int):
    """Split the reduction over K into `split` chunks with ``rfactor``: (partials, write-back).

    ``k`` is split as [split, K / split] and ``rfactor`` turns the outer loop into a spatial
    axis: a new block ``C_rf`` (the partial sums) computes ``C_rf[s, i, j]`` = the dot product
    over chunk s, into a global buffer [split, M, N]; the original block becomes the
    reduction of the partials, ``C[i, j] = sum_s C_rf[s, i, j]``. The chunk loop is moved
    outermost and bound to blockIdx.z, so each chunk is its own grid slice of thread blocks
    and the partials block can be tiled exactly as the plain matmul was (``tile_registers``
    tiles its last three loops). K must be a multiple of `split` (``Step.schedule`` pads K to
    whole ``split * block_k``).
    """
    _, _, k = sch.get_loops(block)
    k_split, _ = sch.split(k, [split, None])
    partials = sch.rfactor(k_split, factor_axis=0)
    i, j, k_split, k_chunk = sch.get_loops(partials)
    sch.reorder(k_split, i, j, k_chunk)
    sch.bind(k_split, "blockIdx.z")
    return partials, block


def reduce_partials(sch: s_tir.Schedule, block: s_tir.SBlockRV, threads: int = 128) -> None:
    """Schedule split-K's second kernel: one thread per C element sums its `split` partials.

    The partials are read along n by consecutive threads (coalesced), summed in a register
    (``cache_write`` to ``local``; its write-back is what padding folds C's bounds check into),
    and the loop over the partials is unrolled. A memory-bound kernel of (split + 1) x M x N
    floats moved: small next to the matmul wherever split-K is chosen (a small M x N).
    """
    i, j, k_split = sch.get_loops(block)
    blocks, thread = sch.split(sch.fuse(i, j), [None, threads])
    sch.bind(blocks, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    total = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(total, thread)
    sch.decompose_reduction(block, k_split)
    sch.unroll(k_split)


def split_k_over_threads(sch: s_tir.Schedule, block: s_tir.SBlockRV, rows: int, k_threads: int,
                         vector: int) -> Tiles:
    """Matrix-vector (N = 1): split each row's K over `k_threads` threads of a block instead of
    over blocks, and sum the partials with a cross-thread reduction. One kernel.

    ``rfactor`` on the thread loop makes each thread's partial sum a block of its own
    (``C_rf``, in a register: its K is every `k_threads`-th run of `vector` elements), and the
    original block the sum over the threads, bound to threadIdx.x: TVM lowers a reduction whose
    loop is bound to threads to warp shuffles (and shared memory across warps). A block holds
    `rows` rows (threadIdx.y); a warp's float4 loads of A cover 512 contiguous bytes of a row,
    and B, a K x 1 column, loads the same way. The loop over K is unrolled up to 8 passes, so
    that many loads per thread are in flight.
    """
    i, j, k = sch.get_loops(block)
    block_i, thread_i = sch.split(i, [None, rows])
    k_loops = sch.split(k, [None, k_threads, vector] if vector > 1 else [None, k_threads])
    passes = int(sch.get(k_loops[0]).extent)  # of the block's threads over K
    thread_k = k_loops[1]
    sch.reorder(block_i, thread_i, j, thread_k, k_loops[0], *k_loops[2:])
    partials = sch.rfactor(thread_k, factor_axis=0)
    block_i, thread_i, j, thread_k = sch.get_loops(block)
    sch.bind(block_i, "blockIdx.x")
    sch.bind(thread_i, "threadIdx.y")
    sch.bind(thread_k, "threadIdx.x")
    sch.compute_at(partials, thread_k)
    sch.set_scope(partials, 0, "local")
    # The partials' own loops under the thread: the passes, then the vector (TVM drops either
    # where its extent is 1).
    own = sch.get_loops(partials)[len(sch.get_loops(block)):]
    k_outer = own[0] if passes > 1 else thread_k
    k_vector = own[-1] if vector > 1 else None
    for operand in (0, 1):  # A's row and B's column, `vector` floats of K per load
        fragment = sch.cache_read(partials, operand, "local")
        sch.compute_at(fragment, k_outer)
        if vector > 1:
            sch.vectorize(sch.get_loops(fragment)[-1])
    if k_vector is not None:
        sch.unroll(k_vector)
    if own:
        sch.decompose_reduction(partials, own[0])
    _unroll_passes(sch, k_outer, passes)
    # thread_j: the loop over N, per thread and outside the threadIdx.y reduction, where C's
    # copy-out or an epilogue goes (inside the reduction's thread loop TVM cannot lower it).
    return Tiles(block, block_i, block_i, thread_i, j, k_outer=k_outer)


def _unroll_passes(sch: s_tir.Schedule, loop: s_tir.LoopRV, passes: int) -> None:
    """Unroll a thread's loop over its `passes` (of K) by the largest of 8, 4, 2 dividing them,
    so that many loads are in flight per thread (the k_threads modes' only latency hiding). An
    odd number of passes (K padded to whole passes: 777 / 64 -> 13) is unrolled by up to 8
    anyway, the last group's missing passes cut off by the predicate the split adds."""
    unroll = next((u for u in (8, 4, 2) if passes % u == 0), min(8, passes))
    if unroll > 1:
        _, unrolled = sch.split(loop, [None, unroll])
        sch.unroll(unrolled)


def vector_matrix_split_k(sch: s_tir.Schedule, block: s_tir.SBlockRV, column_threads: int,
                          k_threads: int, vector: int) -> Tiles:
    """Vector-matrix (M = 1): the mirror of :func:`split_k_over_threads`. Threads along n
    (threadIdx.x, `vector` columns each) and `k_threads` along K (threadIdx.y, a contiguous
    K / k_threads rows each); the partial sums summed across threadIdx.y. One kernel.

    ``rfactor`` on the threadIdx.y loop gives each thread its `vector` partial sums in
    registers (``C_rf``). TVM lowers a cross-thread reduction only where the reduction's
    thread loop is the innermost loop over its block, so C keeps the columns as a serial loop
    outside threadIdx.y (one shared-memory tree per column), and ``C_rf`` is placed under the
    column threads with its own threadIdx.y loop. A warp's float4 loads cover 32 / (threads
    along n) rows of B, each a contiguous 16 x (threads along n) bytes; A's element of each row is
    one float, the same for the block's column threads. The loop over a thread's rows is
    unrolled up to 8, so that many loads are in flight per thread.
    """
    i, j, k = sch.get_loops(block)
    block_j, thread_j, column = sch.split(j, [None, column_threads, vector])
    thread_k, rows = sch.split(k, [k_threads, None])
    sch.reorder(i, block_j, thread_j, column, thread_k, rows)
    partials = sch.rfactor(thread_k, factor_axis=0)
    i, block_j, thread_j, column, thread_k = sch.get_loops(block)
    sch.bind(block_j, "blockIdx.x")
    sch.bind(thread_j, "threadIdx.x")
    sch.bind(thread_k, "threadIdx.y")
    sch.compute_at(partials, thread_j)
    sch.set_scope(partials, 0, "local")
    # C_rf's loops under the column thread: its threadIdx.y, then its columns and its rows
    # (TVM drops either where its extent is 1).
    thread_k_rf, *own = sch.get_loops(partials)[3:]
    sch.bind(thread_k_rf, "threadIdx.y")
    columns_rf = own[0] if vector > 1 else None
    rows_rf = own[-1] if len(own) == (2 if vector > 1 else 1) else None
    if columns_rf is not None and rows_rf is not None:
        sch.reorder(rows_rf, columns_rf)
    load_at = rows_rf if rows_rf is not None else thread_k_rf
    for operand in (0, 1):  # A[0, k]: one float per row; B[k, columns]: `vector` floats per row
        fragment = sch.cache_read(partials, operand, "local")
        sch.compute_at(fragment, load_at)
        if operand == 1 and vector > 1:
            sch.vectorize(sch.get_loops(fragment)[-1])
    if columns_rf is not None:
        sch.unroll(columns_rf)
    # thread_j: the thread's column loop, outside the threadIdx.y reduction, where C's copy-out
    # or an epilogue goes (inside the reduction's thread loop TVM cannot lower it).
    if rows_rf is None:
        return Tiles(block, block_j, block_j, thread_j, column, k_outer=thread_k_rf)
    sch.decompose_reduction(partials, rows_rf)
    _unroll_passes(sch, rows_rf, int(sch.get(rows_rf).extent))
    return Tiles(block, block_j, block_j, thread_j, column, k_outer=rows_rf)
