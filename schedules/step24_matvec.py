"""Step 24 — the matrix-vector rung: M <= 16 rows streamed through B once (or, mirrored, N <= 2
columns of B through A once), at the memory's speed.

Idea: at M = 1 (every decode step of a language model) C = A @ B reads B's K x N once and does
two flops per element read: no tile of any earlier rung is anything but padding, and the time
is B's bytes over the bandwidth. So stream B with the widest loads and keep enough of them in
flight to cover the memory's latency: a thread owns one 16-byte vector of B's columns (4 fp32,
8 fp16 or bf16) and walks its own range of K, `unroll` rows a turn whose loads are issued
together; lanes_n threads side by side cover a row segment (lanes_n x 16 bytes, whole 32-byte
sectors), lanes_k of them split K; one block per lanes_n x 16 bytes of columns (at first 256
threads: 4096 fp32 columns made 128 blocks with 4 loads each in flight, 16 KB an SM, where at
3 TB/s and ~1 us the GPU needs ~3 MB in flight, ~23 KB an SM; the default is now 1024 threads
over 32 columns, 64 KB in flight an SM: the measurements below).
A's M rows are read as scalars (M loads per row of B, L1 hits). Each thread's M x vector fp32
sums are added across its warp's k lanes with shuffles, then across the warps through shared
memory, and rounded to C's dtype once. Every sum is an fp32 sum of fp32 products (the 16-bit
inputs exactly converted): the fp32 contract, no tensor cores. It is written as a kernel (one
sblock with its threads bound, as the Hopper rungs), not a schedule of the base matmul: the
thread-owns-a-vector-and-a-range-of-K mapping with a shuffle reduction is what step 11's
``rfactor`` modes approach and do not reach (0.86x cuBLAS at 1 x 4096 x 4096, issue 49).

Prediction (before any device run): 1 x 4096 x 4096 fp32 reads 64 MB: at ~2.9 TB/s (a device
copy's rate on the H100) 23 us, 1.46 TFLOP/s, against step 11's 1.20 and cuBLAS's ~1.35: 1.05-1.1x
cuBLAS; bf16 (32 MB) half the time. M = 16 does 16 FMA per element: still memory-bound.

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-27, kernel time, one process; 12
configs per shape and dtype, against cuBLAS in the dtype): 1 x 4096 x 4096 bf16 7.9 us (1.28x
cuBLAS's 10.2), fp16 8.7-8.9 (1.08-1.10x), fp32 20.8 (0.87x cuBLAS's 18.0; step 11 21.4, 0.84x);
1 x 8192 x 1024 fp32 6.2 (1.23x), bf16 4.4 (1.24x), fp16 4.4 (1.22x). So the 16-bit products (32
MB of B, which the H200's L2 holds between back-to-back calls) pass cuBLAS, and fp32's 64 MB, read
at 3.2 TB/s, does not: cuBLAS reads it at 3.7. Two lanes (32-byte segments) or one were 10-50%
slower, eight lanes (128 blocks) 35% slower at 4096 columns: what counts is blocks enough for two
an SM, each 64-byte segment whole. Unrolling 4, 8 or 16 rows: within 3%. M = 16: fp32 50.6 us
(1.55x cuBLAS, but step 11 ran 24.2), bf16 40 us (0.22x: cuBLAS uses tensor cores there).

On the H100 (driver 580.159.04, 2026-11-27): the shape benchmark (python -m steps.bench --save,
docs/measured.md) read 1 x 4096 x 4096 fp32 at 1.23 TFLOP/s, 0.90x cuBLAS's 1.36 (step 11:
0.86x), 1 x 8192 x 1024 1.04x, every shape correct (largest error 8.1e-7): the fp32 rows' pick at
both. A probe in one process (results/nvidia-h100-80gb-hbm3/evidence/issue49_rows.txt): 1 x 4096 x
4096 fp32 27.2 us against cuBLAS's 24.5 (0.90x; step 11 27.9), 2.46 TB/s read, 95% of a
device-to-device copy's 2.60 TB/s (read + written) measured in the same call; with 1024 threads
(8 lanes x 128, unroll 4) 25.3 us, 0.97x. bf16 9.0 us against 9.0 (1.00x), and with 1024 threads
(4 lanes x 256, unroll 4) 7.15 us, 1.25x. So 32 columns a block of 1024 threads became the
default (up to M = 4; fewer lanes where N gives fewer than 128 blocks). Measured with it (H100,
2026-11-28, evidence/step23_calibration.txt, 8 configs a shape in one call): 1 x 4096 x 4096 fp32
25.5 us against cuBLAS's 24.7 (0.97x; 8 x 128 x 8: 0.98x), B read at 2.64 TB/s, 112% of a
device-to-device copy's 2.36 TB/s (read + written) in that call; bf16 7.4 us, 1.24x. 1 x 1024 x
8192 fp32 1.51x, bf16 0.96x; 1 x 8192 x 1024 1.04x and 1.14x; 2 x 4096 x 4096 2.56x and 1.11x.
Where it loses: 1 x 16384 x 512 (fp32 0.94x, bf16 0.79x: 8 or 16 lanes of 64 k lanes were 1.05x,
1.08x: with K = 512 a 1024-thread block has half a turn a thread) and 8 x 8192 x 4096 bf16 (0.37x:
cuBLAS's tensor cores, where each row of B feeds 8 rows of A). The shape benchmark (python -m
steps.bench --save, fp32, the same day): 1 x 4096 x 4096 0.97x, 1 x 8192 x 1024 1.07x, every shape
correct; the special values: every class within the fp32 contract (errors 1e-7 to 4e-7, below
SGEMM's: each thread sums K / 128 products). Issue 49's bar for fp32 (>= 1.0x cuBLAS at 1 x 4096
x 4096) is not met: 0.97x, within the 3% that separates the best configs measured.

The mirror (issue 49's "or N <= 16"; ``kernel_rows_of_a``, built wherever N <= 16 < M). At
N = 1 (y = A x: a matrix times a column vector, as `W @ x` writes one token's product) the matrix
streamed is A, whose rows run along K, so the row kernel's mapping (a thread owns a vector of
B's columns) would read A with a stride of K. Turn it over: lanes_k threads side by side along a
row of A, each a 16-byte vector at a time, the neighbours' vectors next to each other (a warp's
load of a row is 512 bytes in a run), `unroll` vectors in flight a thread; lanes_n rows a block;
each thread keeps N fp32 sums and reads B's vec x N values at its vector's k (vec rows of B are
one run of vec x N values: N 16-byte loads); the row's lanes are added by xor shuffles, through
shared memory where a row spans warps. Past K (or M) the thread reads neither A nor B (zeros):
0 x inf would be NaN (the row kernel now reads A's value as 0 past K for the same reason: a
thread's range of K passes K where K is not a multiple of lanes_k x unroll, e.g. 3 x 1001 x 777).
Its default (``mirror_config``): 32 lanes a row, 32 rows a block, halved while the blocks would
be fewer than 128; spare threads (few rows, long K) go to more lanes a row.

Prediction (before the device run): N = 1 is step 24's own problem with A for B, bound by A's
bytes: 4096 x 1 x 4096 bf16 (32 MB) ~7-8 us at the H200's ~4.2 TB/s copy rate, against cuBLAS's
~10 and step 23's 17 (the committed pick, 0.59x cuBLAS): 1.3x cuBLAS; fp32 ~ step 11 (its
K-split rows already stream A). Larger N multiplies the FMAs and B's reads from L1 by N.

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-29, kernel time, one process per
call; results/nvidia-h200/evidence/matvec_mirror.txt, git show d1feff7:probe/matvec_n.py and
git show e747052:probe/matvec_n2.py): correct in fp32, bf16 and fp16 at 2048 x 1 x 2048, 1000 x
3 x 777, 17 x 16 x 3001, 64 x 1 x 65536, 12345 x 1 x 777 and 513 x 7 x 1025, and +-inf in A's
last column gives +-inf, never NaN, where ranges pass K (both kernels; tests/test_gpu_matvec.py:
35 passed). A device-to-device copy ran 4.18 TB/s (read + written) in the same call.
- N = 1, bf16: 4096 x 1 x 4096 6.88 us (cuBLAS 9.75-9.92, 1.43x; step 23 18.27), 8192 x 1 x 1024
  4.85 (cuBLAS 5.29-5.39, 1.10x), 2048 x 1 x 2048 3.56 (4.94, 1.39x), 12345 x 1 x 777 6.64 (8.12,
  1.22x); 16384 x 1 x 4096 (128 MB, more than L2 holds) 34.0 against 33.3 (0.98x), A read at
  3.95 TB/s, 94% of the copy's rate. Below 128 MB the rate passes the copy's (4.9 TB/s at 4096 x
  1 x 4096): A stays in the 50 MB L2 between back-to-back calls, for cuBLAS too. fp16 the same
  (4096 x 1 x 4096 6.76 against 9.15-9.19).
- N = 1, fp32: as predicted, about step 11's time (4096 x 1 x 4096 18.57 against 18.50, cuBLAS
  22.3; 8192 x 1 x 1024 7.10 against 6.38), 1.19x cuBLAS at 12345 x 1 x 777 with 8 rows x 64
  lanes (7.95 us; step 11 10.93). The H200's fp32 rows were not re-measured: step 11 stays their pick.
- N = 2: bf16 4096 x 2 x 4096 8.38 us against cuBLAS's 17.04 (2.03x) and step 23's 17.82; fp32
  20.5 against step 11's 32.5 and cuBLAS's 39.6. N = 4: 20.8 against step 23's 18.2 (bf16) and
  39.5 against step 11's 29.6 (fp32); N = 8 and 16 4-10x slower than those (139 us at 16 bf16).
  The configs tried (rows 4-32, lanes 32-64, unroll 1-4) moved none of it by more than 7%: a
  thread's N loads of B at a stride of 16 N bytes from its neighbour's touch 32 lines a warp
  instruction from N = 8, so B's reads from L1, not A's from DRAM, set the time. So the rung
  applies (``applies``: what the benchmark times and the dispatch rule picks from) to N <= 2
  (MIRROR_N); from N = 4 split-K on tensor cores (step 23) or CUDA cores (step 11) stays the
  pick. B's values staged in shared memory, transposed (a thread's 16-byte reads then
  consecutive across lanes), is what larger N would need.
- The H200's 16-bit dispatch rows with it (python -m steps.bench --dtype bf16 --steps
  13,18,20,23,24,26,27 --fastest --save, and fp16; results/nvidia-h200/{bf16,fp16}/shapes.*):
  the pick at 4096 x 1 x 4096 1.46x cuBLAS bf16 and 1.34x fp16 (was step 23: 0.59x), 8192 x 1 x
  1024 1.10x / 1.09x (0.47x); 1 x 4096 x 4096 (the row kernel) 1.52x / 1.43x.

A turn a thread at short K (16 bits, 2026-11-29, from measurements already committed): the H200's
bf16 audit read the pick at 1 x 16384 x 512 0.57x cuBLAS bf16 (step 24, 4 lanes x 256 k lanes: K =
512 gives a thread 2 rows, half of its 4-row turn, B read at ~2 TB/s), and the H100's calibration
(evidence/step23_calibration.txt, 8 configs in one call) had measured the same default there at
6.68 us (0.79x) against 5.08 (1.04x) for 8 lanes x 128 (a whole turn) and 4.89 (1.08x) for 16 x 64.
So in fp16 and bf16 the default widens to 8 lanes where 1024 / lanes x 4 rows would pass K; no
shape of the calibration but this one changes (1 x 8192 x 1024 keeps 4 x 256: 5.17 us against
5.45 for 8 x 128). fp32 (an fp32-accurate rung: its special values would need a GPU run) keeps
its rule; its best there was 8 x 64 (6.94 us against the default's 7.83). On the H200 (2026-11-29,
python -m steps.bench --dtype bf16 --steps 24 --shapes 1x16384x512 --in-turns, and fp16;
git show 3827b69:results/nvidia-h200/evidence/paired_rotated_probe.txt) the new default reads
1.00x cuBLAS bf16 and 0.99x fp16 in turns, 4.9 us (the audit read the old one at 0.57x and
0.60x); the guard flags both readings host-bound, as it does cuBLAS's 4.8 us call.

Run: python -m steps.step24
"""

from __future__ import annotations

from tvm.script import tirx as T

from .config import DTYPES as TVM_DTYPES, ConfigError, MatvecConfig, WARP_SIZE

NUMBER = 24
NAME = "matrix-vector (M <= 16 or N <= 2)"
IDEA = "each thread streams a 16-byte vector of B's columns down its range of K (N <= 2: of a row of A); sums added by shuffles and shared memory"
PRECISION = "fp32"  # fp32 sums of exact products: SGEMM's accuracy (16-bit inputs: the dtype's own)
DTYPES = ("fp32", "fp16", "bf16")
PRIOR = 11  # the matrix-vector mode (k_threads) of step 11 is what this rung replaces
Config = MatvecConfig
PASS_CONFIG: dict = {}
PIECES = ("applies", "vector_of", "default_config", "kernel", "mirror_config", "kernel_rows_of_a")

EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024, 2048, 4096, 8192),
    "a square is not this rung's shape: it reads B once per 16 rows of A (M / 16 times) on CUDA cores",
)
EXPECTED_REGRESSION_BF16 = EXPECTED_REGRESSION_FP16 = EXPECTED_REGRESSION

SHARED_LIMIT = 48 * 1024
MIN_BLOCKS = 128  # blocks the default keeps where N allows: one an SM, less 4 of the H100's 132
TURN = 4  # the default's unroll: rows of K whose loads a thread issues together
ROWS = 16  # the rung's M: a larger M is done 16 rows at a time (correct, and B read once per 16 rows)
MIRROR_N = 2  # the mirror is faster than every other rung and cuBLAS up to this N (H200): applies


def applies(M: int, N: int, K: int) -> bool:
    """The shapes this rung is for (Step.applies_to): M <= 16, or N <= MIRROR_N (the mirror's
    measured ground: docstring). It builds, and is right, for any shape."""
    return M <= ROWS or N <= MIRROR_N


def streams_a(M: int, N: int) -> bool:
    """Whether the kernel is the mirror (``kernel_rows_of_a``): N <= 16 < M, A the matrix streamed."""
    return N <= ROWS < M


def vector_of(N: int, dtype: str) -> int:
    """Elements per load: 16 bytes where N keeps every row's vectors aligned, else one."""
    width = 16 // (4 if dtype == "fp32" else 2)
    return width if N % width == 0 else 1


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> MatvecConfig:
    """The mirror (N <= 16 < M): ``mirror_config``. Up to M = 4: 1024 threads a block over 32 columns (8 lanes of 4 fp32, or 4 of 8 fp16 /
    bf16), 4 rows in flight a thread; fewer lanes where N would give fewer than 128 blocks (at
    least 2: a 32-byte sector a row); in 16 bits more lanes (up to 8) where K would leave a thread
    less than a turn of 4 rows. From M = 5: 8 lanes x 32 k lanes, 4 rows (the partial sums
    in shared memory grow with M). The 1024-thread configs were the fastest on the H100 at
    1 x 4096 x 4096 (7% in fp32, 25% in bf16 over 256 threads), the others on an H200 (the docstring)."""
    if streams_a(M, N):
        return mirror_config(M, N, K, dtype)
    if M > 4:
        return MatvecConfig(lanes_n=8, lanes_k=32, unroll=4)
    lanes = 8 if dtype == "fp32" else 4
    while lanes > 2 and -(-N // (lanes * vector_of(N, dtype))) < MIN_BLOCKS:
        lanes //= 2
    # 16 bits: a whole turn (4 rows of K) a thread where K is short; 1 x 16384 x 512 ran half a turn.
    while dtype != "fp32" and lanes < 8 and 1024 // lanes * TURN > K:
        lanes *= 2
    return MatvecConfig(lanes_n=lanes, lanes_k=1024 // lanes, unroll=TURN)


def mirror_config(M: int, N: int, K: int, dtype: str = "fp32") -> MatvecConfig:
    """The mirror's default: a warp's 32 lanes along a row of A (fewer where K has fewer 16-byte
    vectors), 32 rows a block, halved while the blocks would be fewer than MIN_BLOCKS; where that
    leaves threads spare (few rows, long K) more lanes a row, while each keeps 16 vectors at least."""
    vec = vector_of(K, dtype)
    lanes = WARP_SIZE
    while lanes > 4 and lanes * vec > K:
        lanes //= 2
    rows = 32 if N <= 4 else 8  # past N = 4 a thread's B values take registers: fewer threads a block
    while rows > 1 and -(-M // rows) < MIN_BLOCKS:
        rows //= 2
    while rows * lanes * 2 <= 1024 and K // (lanes * 2 * vec) >= 16:
        lanes *= 2
    while rows * lanes % WARP_SIZE:  # whole warps: few lanes (short K) take more rows
        rows *= 2
    return MatvecConfig(lanes_n=rows, lanes_k=lanes, unroll=4 if N <= 4 else 2)


def shared_bytes(M: int, N: int, cfg: MatvecConfig, dtype: str) -> int:
    """The row kernel's partial sums (the mirror's are a row's warps' N sums: 2 KB at most)."""
    return cfg.threads // WARP_SIZE * min(M, ROWS) * cfg.lanes_n * vector_of(N, dtype) * 4


def kernel(M: int, N: int, K: int, cfg: MatvecConfig, dtype: str = "fp32"):
    if streams_a(M, N):
        return kernel_rows_of_a(M, N, K, cfg, dtype)
    dt = TVM_DTYPES[dtype]
    MB = min(M, ROWS)  # rows of A a block takes: all of them up to 16; larger M re-reads B per 16 rows
    vec = vector_of(N, dtype)
    ln, lk, u = cfg.lanes_n, cfg.lanes_k, cfg.unroll
    threads, cols, warps = cfg.threads, cfg.lanes_n * vec, cfg.threads // WARP_SIZE
    blocks = -(-N // cols)
    per = -(-(-(-K // lk)) // u) * u  # k rows a thread: K over the k lanes, whole turns of `unroll`
    if shared_bytes(M, N, cfg, dtype) > SHARED_LIMIT:
        raise ConfigError(f"step 24's partial sums need {shared_bytes(M, N, cfg, dtype)} bytes of shared memory "
                          f"(warps x M x lanes_n x vector floats), more than {SHARED_LIMIT}: fewer lanes_n or threads")
    shuffles = (WARP_SIZE // ln).bit_length() - 1  # xor distances ln, 2 ln, ... 16: a warp's k lanes

    def rounded(value):
        return value if dt == "float32" else T.Cast(dt, value)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), dt), B: T.Buffer((K, N), dt), C: T.Buffer((M, N), dt)):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for by in T.thread_binding(-(-M // MB), thread="blockIdx.y"):
            for bx in T.thread_binding(blocks, thread="blockIdx.x"):
                for tid in T.thread_binding(threads, thread="threadIdx.x"):
                    with T.sblock("C"):
                        T.reads(A[0:M, 0:K], B[0:K, 0:N])
                        T.writes(C[0:M, 0:N])
                        acc = T.sblock_alloc_buffer((MB * vec,), "float32", scope="local")
                        b = T.sblock_alloc_buffer((u * vec,), dt, scope="local")
                        part = T.sblock_alloc_buffer((warps * MB * cols,), "float32", scope="shared")
                        for i in T.unroll(MB * vec):
                            acc[i] = T.float32(0)
                        for kt in T.serial(per // u):
                            # A turn's `unroll` rows of loads first, all in flight together; then the math.
                            for r in T.unroll(u):
                                if tid // ln * per + kt * u + r < K and bx * cols + tid % ln * vec < N:
                                    for v in T.vectorized(vec):
                                        b[r * vec + v] = B[tid // ln * per + kt * u + r, bx * cols + tid % ln * vec + v]
                                else:
                                    for v in T.vectorized(vec):
                                        b[r * vec + v] = T.Cast(dt, T.float32(0))
                            for r in T.unroll(u):
                                for m in T.unroll(MB):
                                    for v in T.unroll(vec):
                                        acc[m * vec + v] = acc[m * vec + v] + T.Cast("float32", T.if_then_else(
                                            tid // ln * per + kt * u + r < K, A[T.min(by * MB + m, M - 1), T.min(tid // ln * per + kt * u + r, K - 1)],
                                            T.Cast(dt, T.float32(0)))) * T.Cast("float32", b[r * vec + v])
                        # The warp's k lanes of each column added together (lanes tid % ln alike).
                        for i in T.unroll(MB * vec):
                            for s in T.unroll(shuffles):
                                acc[i] = acc[i] + T.tvm_warp_shuffle_xor(T.uint32(0xFFFFFFFF), acc[i], T.shift_left(ln, s), WARP_SIZE, WARP_SIZE)
                        if tid % WARP_SIZE < ln:
                            for m in T.unroll(MB):
                                for v in T.unroll(vec):
                                    part[(tid // WARP_SIZE * MB + m) * cols + tid % ln * vec + v] = acc[m * vec + v]
                        T.tvm_storage_sync("shared")
                        for o in T.serial(-(-(MB * cols) // threads)):
                            if (o * threads + tid < MB * cols and by * MB + (o * threads + tid) // cols < M
                                    and bx * cols + (o * threads + tid) % cols < N):
                                C[by * MB + (o * threads + tid) // cols, bx * cols + (o * threads + tid) % cols] = rounded(
                                    _sum_warps(part, warps, MB, cols, o * threads + tid))

    return main


def kernel_rows_of_a(M: int, N: int, K: int, cfg: MatvecConfig, dtype: str = "fp32"):
    """The mirror, N <= 16 < M (C^T = B^T A^T: the matrix streamed is A): lanes_n rows of A a
    block, lanes_k threads side by side along each row, a thread's 16-byte vectors of the row
    interleaved with its neighbours' (a warp's loads of a row are consecutive: coalesced),
    `unroll` of them issued together a turn; each thread keeps N fp32 sums, multiplies each
    element of A by B's N values at its k (B is K x N: small, read through L1), and the row's lanes
    are added by xor shuffles (and through shared memory where a row spans warps)."""
    dt = TVM_DTYPES[dtype]
    vec = vector_of(K, dtype)  # along K now: a row of A is what is streamed
    rows, lk, u = cfg.lanes_n, cfg.lanes_k, cfg.unroll
    threads, span = cfg.threads, min(cfg.lanes_k, WARP_SIZE)  # span: a row's lanes in one warp
    spread = max(1, lk // WARP_SIZE)  # warps a row's lanes span
    blocks, turns = -(-M // rows), -(-K // (lk * vec * u))
    shuffles = span.bit_length() - 1  # xor distances 1, 2, ... span / 2
    if lk & (lk - 1):  # a row's lanes are added by xor shuffles within a warp, then by whole warps
        raise ConfigError(f"step 24's mirror (N <= 16 < M) needs lanes_k to be a power of two, got {lk}")

    def k_of(t, j, tid, v):  # the k of element v of thread tid's vector j in turn t
        return ((t * u + j) * lk + tid % lk) * vec + v

    def rounded(value):
        return value if dt == "float32" else T.Cast(dt, value)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), dt), B: T.Buffer((K, N), dt), C: T.Buffer((M, N), dt)):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tid in T.thread_binding(threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A[0:M, 0:K], B[0:K, 0:N])
                    T.writes(C[0:M, 0:N])
                    acc = T.sblock_alloc_buffer((N,), "float32", scope="local")
                    a = T.sblock_alloc_buffer((u * vec,), dt, scope="local")
                    b = T.sblock_alloc_buffer((u * vec * N,), dt, scope="local")  # B's vec rows at each vector's k
                    Bf = T.decl_buffer((K * N,), dt, data=B.data)  # B flat: a vector's vec rows are vec x N in a run
                    part = T.sblock_alloc_buffer((rows * spread * N,), "float32", scope="shared")
                    for n in T.unroll(N):
                        acc[n] = T.float32(0)
                    for t in T.serial(turns):
                        # A turn's `unroll` vectors of the row first, all in flight together; then the math.
                        for j in T.unroll(u):
                            if k_of(t, j, tid, 0) < K and bx * rows + tid // lk < M:
                                for v in T.vectorized(vec):
                                    a[j * vec + v] = A[bx * rows + tid // lk, k_of(t, j, tid, v)]
                                # B's rows k .. k + vec - 1: vec x N values in a run, N loads of 16 bytes
                                for w in T.unroll(N):
                                    for v in T.vectorized(vec):
                                        b[(j * N + w) * vec + v] = Bf[k_of(t, j, tid, 0) * N + w * vec + v]
                            else:  # past K (or M): zeros, and B never read there (0 x inf would be NaN)
                                for v in T.vectorized(vec):
                                    a[j * vec + v] = T.Cast(dt, T.float32(0))
                                for w in T.unroll(N):
                                    for v in T.vectorized(vec):
                                        b[(j * N + w) * vec + v] = T.Cast(dt, T.float32(0))
                        for j in T.unroll(u):
                            for v in T.unroll(vec):
                                for n in T.unroll(N):
                                    acc[n] = acc[n] + T.Cast("float32", a[j * vec + v]) * T.Cast("float32", b[j * N * vec + v * N + n])
                    # The row's lanes in this warp added together (lanes tid % lk, adjacent).
                    for n in T.unroll(N):
                        for s in T.unroll(shuffles):
                            acc[n] = acc[n] + T.tvm_warp_shuffle_xor(T.uint32(0xFFFFFFFF), acc[n], T.shift_left(1, s), WARP_SIZE, WARP_SIZE)
                    if spread == 1:
                        if tid % lk == 0 and bx * rows + tid // lk < M:
                            for n in T.unroll(N):
                                C[bx * rows + tid // lk, n] = rounded(acc[n])
                    else:
                        if tid % WARP_SIZE == 0:
                            for n in T.unroll(N):
                                part[(tid // lk * spread + tid % lk // WARP_SIZE) * N + n] = acc[n]
                        T.tvm_storage_sync("shared")
                        if tid < rows * N and bx * rows + tid // N < M:
                            C[bx * rows + tid // N, tid % N] = rounded(_sum_warps(part, spread, 1, N, tid // N * spread * N + tid % N))

    return main


def _sum_warps(part, warps: int, M: int, cols: int, i):
    """The sum over the warps of partial sum i (row i // cols, column i % cols), in warp order."""
    total = part[i]
    for w in range(1, warps):
        total = total + part[w * M * cols + i]
    return total
