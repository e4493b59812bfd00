"""Step configurations: one dataclass per idea, each extending the one before it.

A config is checked against the problem size before anything is built, so a bad tile gets a
one-line ``ConfigError`` naming the broken constraint instead of a TVM traceback or a kernel
that fails to load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

MAX_THREADS_PER_BLOCK = 1024
# Static __shared__ arrays above 48 KB are rejected by ptxas / at load; above it a step's
# tiles go to dynamic shared memory (scope "shared.dyn"), which TVM's runtime opts in to.
MAX_STATIC_SHARED_BYTES = 48 * 1024
# The per-block opt-in limit of dynamic shared memory, per arch (CUDA programming guide).
MAX_SHARED_BYTES = {"sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
                    "sm_90a": 227 * 1024}
FLOAT_BYTES = 4
WARP_SIZE = 32


class ConfigError(ValueError):
    """A size or tile configuration that cannot be built; the message is one line."""


# The input dtypes of the ladder, by the names users type (--dtype), and TVM's names for them.
# 16-bit inputs are multiplied with fp32 accumulation and C is stored in the input dtype (what
# cuBLAS and torch.mm give for 16-bit inputs).
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def check_dtype(dtype: str) -> str:
    """`dtype` (fp32, fp16 or bf16), or ConfigError in one line."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


# TVM indexes a buffer with int32: a matrix of 2^31 elements or more overflows its index
# (TVM stops with "Literal value ... exceeds range of int32", or, where no such literal is
# formed, the kernel would compute wrong addresses), so each of A, B and C must stay below.
MAX_ELEMENTS = 2**31


def check_sizes(M: int, N: int, K: int) -> None:
    for name, value in (("M", M), ("N", N), ("K", K)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    for name, rows, cols in (("A", M, K), ("B", K, N), ("C", M, N)):
        if rows * cols >= MAX_ELEMENTS:
            raise ConfigError(
                f"{name} would have {rows}x{cols} = {rows * cols} elements; M*K, K*N and M*N must "
                f"each be below 2^31 = {MAX_ELEMENTS} (TVM indexes buffers with int32)"
            )


def _check_integer_fields(cfg, may_be_zero=lambda name: False) -> None:
    """Every field of `cfg` an int (not a bool): positive, or non-negative where `may_be_zero`."""
    for f in fields(cfg):
        if f.name == "dtype":  # the tensor-core configs' input dtype, a name (checked by them)
            continue
        value = getattr(cfg, f.name)
        least = 0 if may_be_zero(f.name) else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            kind = "a non-negative" if least == 0 else "a positive"
            raise ConfigError(f"{f.name} must be {kind} integer, got {value!r}")


def _check_vector(vector: int) -> None:
    if vector not in (1, 2, 4):
        raise ConfigError(f"vector must be 1, 2 or 4 floats (at most 16 bytes), got {vector}")


def _divides(what: str, tile: int, size_name: str, size: int) -> None:
    if size % tile:
        raise ConfigError(f"{what} {tile} must divide {size_name}={size}")


@dataclass(frozen=True)
class GridConfig:
    """Step 1: a block_m x block_n thread block, one C element per thread."""

    block_m: int = 16
    block_n: int = 16

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
        return cls(**data)

    @property
    def thread_m(self) -> int:
        return 1

    @property
    def thread_n(self) -> int:
        return 1

    @property
    def threads_m(self) -> int:
        return self.block_m // self.thread_m

    @property
    def threads_n(self) -> int:
        return self.block_n // self.thread_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n

    @property
    def shared_bytes(self) -> int:
        return 0

    @property
    def shared_scope(self) -> str:
        """Static shared memory up to 48 KB, dynamic above (up to the arch's opt-in limit)."""
        return "shared.dyn" if self.shared_bytes > MAX_STATIC_SHARED_BYTES else "shared"

    # Thread and block mapping, fixed when the loops are tiled; step 9 changes it.
    @property
    def warp_m(self) -> int | None:
        """Threads of a warp along m (warp tiling), or None: threads row-major over the tile."""
        return None

    @property
    def raster(self) -> int:
        """Width in blocks of a rasterization group (1: blocks in plain row-major order)."""
        return 1

    @property
    def thread_axes(self) -> tuple[int, int]:
        """Extents of (threadIdx.y, threadIdx.x); every copy binds the same two."""
        if self.warp_m is None:
            return self.threads_m, self.threads_n
        return self.threads // WARP_SIZE, WARP_SIZE

    @property
    def copy_rounds_outer(self) -> bool:
        """Cooperative copies: a warp-contiguous float4 per thread per round (True), or each
        thread one contiguous run (False: what step 6's register staging needs)."""
        return False

    def check_shared_memory(self, arch: str = "sm_90") -> None:
        limit = MAX_SHARED_BYTES.get(arch, MAX_SHARED_BYTES["sm_90"])
        if self.shared_bytes > limit:
            raise ConfigError(
                f"{self.shared_bytes} bytes of shared memory per block exceeds the "
                f"{limit // 1024} KB per-block limit of {arch}"
            )

    def validate(self, M: int, N: int, K: int) -> None:
        check_sizes(M, N, K)
        _check_integer_fields(self, lambda name: name in ("pad_a", "unroll_k", "transpose_a", "stage_pads"))
        # M, N, K need not be multiples of the tiles: Step.schedule pads (schedules/transforms/padding.py).
        _divides("thread_m", self.thread_m, "block_m", self.block_m)
        _divides("thread_n", self.thread_n, "block_n", self.block_n)
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise ConfigError(
                f"{self.threads} threads per block ({self.threads_m}x{self.threads_n}) "
                f"exceeds the limit of {MAX_THREADS_PER_BLOCK}"
            )
        self.check_shared_memory("sm_90")  # the largest limit; build() checks its own arch


@dataclass(frozen=True)
class RegisterTileConfig(GridConfig):
    """Step 2: each thread computes a thread_m x thread_n tile of C."""

    block_m: int = 128
    block_n: int = 128
    thread_m: int = 8  # type: ignore[assignment]
    thread_n: int = 8  # type: ignore[assignment]


@dataclass(frozen=True)
class SharedTileConfig(RegisterTileConfig):
    """Step 3: K is walked in block_k slices staged through shared memory."""

    block_k: int = 16

    @property
    def shared_bytes(self) -> int:
        return (self.block_m + self.block_n) * self.block_k * FLOAT_BYTES


@dataclass(frozen=True)
class CooperativeFetchConfig(SharedTileConfig):
    """Step 4: the block's threads share the tile copy, `vector` floats per load."""

    vector: int = 4

    def validate(self, M: int, N: int, K: int) -> None:
        super().validate(M, N, K)
        _check_vector(self.vector)
        # Each copied row must be whole vectors, and every thread must copy the same number.
        _divides("vector", self.vector, "block_k", self.block_k)
        _divides("vector", self.vector, "block_n", self.block_n)
        # Not N, K: where they break float4 alignment Step.schedule narrows the vector
        # (schedules/padding.global_vector).
        per_round = self.threads * self.vector
        for name, elems in (("A", self.block_m * self.block_k), ("B", self.block_k * self.block_n)):
            if elems % per_round:
                raise ConfigError(
                    f"the {name} tile ({elems} floats) must split evenly over "
                    f"{self.threads} threads x vector {self.vector}"
                )


@dataclass(frozen=True)
class AsyncCopyConfig(CooperativeFetchConfig):
    """Step 7: `stages` shared buffers filled by cp.async, `stages - 1` slices ahead of the math."""

    stages: int = 3

    @property
    def shared_bytes(self) -> int:
        return self.stages * super().shared_bytes

    @property
    def copy_rounds_outer(self) -> bool:
        return True

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.stages, int) or not 2 <= self.stages <= 4:
            raise ConfigError(f"stages must be 2, 3 or 4, got {self.stages!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class ConflictFreeConfig(AsyncCopyConfig):
    """Step 8: permuted shared tiles, so fragment loads hit distinct banks. A is stored
    k-major (`transpose_a` 1) or m-major (0); its rows are padded by `pad_a` floats."""

    pad_a: int = 4
    transpose_a: int = 0

    @property
    def shared_bytes(self) -> int:
        if self.transpose_a:
            a = self.block_k * (self.block_m + self.pad_a)
        else:
            a = self.block_m * (self.block_k + self.pad_a)
        return self.stages * (a + self.block_k * self.block_n) * FLOAT_BYTES

    def validate(self, M: int, N: int, K: int) -> None:
        if self.transpose_a not in (0, 1) or isinstance(self.transpose_a, bool):
            raise ConfigError(f"transpose_a must be 0 or 1, got {self.transpose_a!r}")
        # A pad that is not a whole number of float4s misaligns the 16-byte copies and loads.
        if not isinstance(self.pad_a, int) or isinstance(self.pad_a, bool) or self.pad_a < 0 or self.pad_a % 4:
            raise ConfigError(f"pad_a must be a multiple of 4 floats (16 bytes), got {self.pad_a!r}")
        # 32 floats pass over all 32 banks once: a larger pad shifts banks as pad_a - 32 does.
        if self.pad_a >= 32:
            raise ConfigError(f"pad_a must be below 32 floats (one pass over the banks), got {self.pad_a}")
        # pad_a may be 0: check the other fields without it.
        super().validate(M, N, K)


@dataclass(frozen=True)
class WarpTileConfig(ConflictFreeConfig):
    """Step 9: each warp covers a warp_m x (32 / warp_m) block of threads; blocks are
    launched in groups `raster` blocks wide."""

    warp_m: int = 4  # type: ignore[assignment]
    raster: int = 1  # type: ignore[assignment]

    @property
    def warp_n(self) -> int:
        return WARP_SIZE // self.warp_m

    def validate(self, M: int, N: int, K: int) -> None:
        if self.warp_m not in (1, 2, 4, 8, 16, 32):
            raise ConfigError(f"warp_m must be a power of two dividing 32, got {self.warp_m!r}")
        super().validate(M, N, K)
        _divides("warp_m", self.warp_m, "threads along m", self.threads_m)
        _divides("32 / warp_m", self.warp_n, "threads along n", self.threads_n)


@dataclass(frozen=True)
class TunedConfig(WarpTileConfig):
    """Step 10: explicit unrolling of the inner k loop, plus a tuned config per size."""

    unroll_k: int = 1  # 1: unroll the k slice fully; 0: leave it to nvcc

    def validate(self, M: int, N: int, K: int) -> None:
        if self.unroll_k not in (0, 1):
            raise ConfigError(f"unroll_k must be 0 or 1, got {self.unroll_k!r}")
        super().validate(M, N, K)


# Chunks of K per split-K call: beyond this the partial buffer and its reduction cost more
# than the grid gains (the rule never asks for more; schedules/shape_rule.py).
MAX_SPLIT_K = 64


@dataclass(frozen=True)
class SplitKConfig(TunedConfig):
    """Step 11: the reduction over K split into `split_k` chunks (rfactor), each chunk its own
    slice of the grid (blockIdx.z), summed by a second kernel; split_k 1 is step 10.
    `stage_pads` 1: where N or K breaks `vector` alignment, the misaligned operands are copied
    by kernels of their own into padded, aligned buffers, so the matmul keeps its full vector
    width (schedules/transforms/padding.py, ``stage_padding``); 0: the padding is inlined (the vector
    narrows). Aligned shapes: no effect.
    `k_threads` > 1 (matrix-vector shapes, N = 1): each row of C is one dot product whose K is
    split over `k_threads` threads of a block with rfactor and summed by a cross-thread
    reduction (warp shuffles): one kernel, no partial buffer (``split_k_over_threads``). A block
    holds `block_m` rows x `k_threads` threads (a warp is 32 threads of one row: warp_m 1), and
    one pass of them covers `block_k` = k_threads x vector of K; the micro-tile is 1 x 1 and
    block_n 1. Rows are not padded (block_m | M); K is, to whole passes, as a predicate on the
    loads (A's rows must stay aligned: vector | K).
    `k_threads` > 1 with `block_n` > 1 (vector-matrix shapes, M = 1): the mirror. Each column
    of C is a dot product with A's one row; a block holds block_n / vector threads along n
    (threadIdx.x, `vector` columns each: a float4 of a row of B per load) x `k_threads` along K
    (threadIdx.y, each a contiguous K / k_threads rows), and the sum over threadIdx.y is a
    cross-thread reduction through shared memory (``vector_matrix_split_k``). `block_k` =
    k_threads (one row per thread per pass), block_m 1, thread_n = vector. No padding
    (block_n | N, block_k | K)."""

    split_k: int = 1
    stage_pads: int = 0
    k_threads: int = 1

    # The fields matrix-vector mode does not use, at the one value each it accepts.
    MATRIX_VECTOR_FIXED = {"block_n": 1, "thread_m": 1, "thread_n": 1, "warp_m": 1, "split_k": 1,
                           "stage_pads": 0, "stages": 2, "pad_a": 0, "transpose_a": 0, "raster": 1,
                           "unroll_k": 1}

    # And those vector-matrix mode does not use (thread_n is the vector, block_k k_threads).
    VECTOR_MATRIX_FIXED = {name: value for name, value in {**MATRIX_VECTOR_FIXED, "block_m": 1}.items()
                           if name not in ("block_n", "thread_n")}

    @classmethod
    def matrix_vector(cls, rows: int, k_threads: int, vector: int = 4) -> "SplitKConfig":
        """A ``k_threads`` > 1 config for N = 1: `rows` rows per block, K over `k_threads` threads."""
        return cls(block_m=rows, block_k=k_threads * vector, vector=vector, k_threads=k_threads,
                   **cls.MATRIX_VECTOR_FIXED)

    @classmethod
    def vector_matrix(cls, column_threads: int, k_threads: int, vector: int = 4) -> "SplitKConfig":
        """A ``k_threads`` > 1 config for M = 1: `column_threads` threads along n (`vector`
        columns each) x `k_threads` threads along K per block."""
        return cls(block_n=column_threads * vector, thread_n=vector, block_k=k_threads, vector=vector,
                   k_threads=k_threads, **cls.VECTOR_MATRIX_FIXED)

    @property
    def is_vector_matrix(self) -> bool:
        return self.k_threads > 1 and self.block_n > 1

    @property
    def threads_n(self) -> int:
        # Matrix-vector mode: a block's threads are block_m rows x k_threads along K;
        # vector-matrix mode: block_n / thread_n along n x k_threads along K.
        if self.is_vector_matrix:
            return super().threads_n * self.k_threads
        return self.k_threads if self.k_threads > 1 else super().threads_n

    @property
    def shared_bytes(self) -> int:
        # No shared tiles in either k_threads mode; the cross-thread reduction's buffer: across
        # warps (matrix-vector, warp shuffles within one), always (vector-matrix: a sum over
        # threadIdx.y, the tree in shared memory).
        if self.is_vector_matrix:
            return self.threads * FLOAT_BYTES
        if self.k_threads > 1:
            return self.block_m * self.k_threads * FLOAT_BYTES if self.k_threads > WARP_SIZE else 0
        return super().shared_bytes

    def validate(self, M: int, N: int, K: int) -> None:
        if self.stage_pads not in (0, 1) or isinstance(self.stage_pads, bool):
            raise ConfigError(f"stage_pads must be 0 or 1, got {self.stage_pads!r}")
        if not isinstance(self.k_threads, int) or isinstance(self.k_threads, bool) or self.k_threads < 1:
            raise ConfigError(f"k_threads must be a positive integer, got {self.k_threads!r}")
        if self.k_threads > 1:
            # No shared tiles, copies or warp grid to check: the fields' types and the thread
            # limit (GridConfig), then the matrix-vector rules.
            GridConfig.validate(self, M, N, K)
            if self.block_n > 1:
                self._validate_vector_matrix(M, N, K)
            else:
                self._validate_matrix_vector(M, N, K)
            return
        super().validate(M, N, K)
        if not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ConfigError(f"split_k must be 1-{MAX_SPLIT_K}, got {self.split_k!r}")
        # Chunks are whole block_k slices of equal length (K pads to split_k * block_k): the
        # last chunk must still start inside K, or some chunks would hold only padding.
        if (self.split_k - 1) * self.chunk_k(K) >= K:
            raise ConfigError(
                f"split_k {self.split_k} leaves chunks of only padding at K={K} (chunks of "
                f"{self.chunk_k(K)} = whole block_k {self.block_k} slices); use a smaller split_k"
            )
        # A staged operand is a padded global buffer that TVM indexes in int32, like A, B, C.
        m_pad, n_pad = -(-M // self.block_m) * self.block_m, -(-N // self.block_n) * self.block_n
        k_pad = self.split_k * self.chunk_k(K)
        for name, rows, cols, row_length in (("A", m_pad, k_pad, K), ("B", k_pad, n_pad, N)):
            if self.stage_pads and row_length % self.vector and rows * cols >= MAX_ELEMENTS:
                raise ConfigError(
                    f"stage_pads: the padded copy of {name} would have {rows}x{cols} = {rows * cols} "
                    f"elements, not below 2^31 (TVM indexes buffers with int32); use stage_pads 0"
                )

    def _validate_matrix_vector(self, M: int, N: int, K: int) -> None:
        """The rules of ``k_threads`` > 1, each a one-line ConfigError."""
        if self.k_threads % WARP_SIZE or self.k_threads & (self.k_threads - 1):
            raise ConfigError(f"k_threads must be 1 or a power of two from {WARP_SIZE}, got {self.k_threads}")
        if N != 1:
            raise ConfigError(f"k_threads > 1 is for matrix-vector shapes (N = 1), got N={N}")
        _check_vector(self.vector)
        for name, value in self.MATRIX_VECTOR_FIXED.items():
            if getattr(self, name) != value:
                raise ConfigError(f"k_threads > 1 needs {name} {value}, got {getattr(self, name)}")
        if self.block_k != self.k_threads * self.vector:
            raise ConfigError(f"k_threads > 1 needs block_k = k_threads x vector = "
                              f"{self.k_threads * self.vector}, got {self.block_k}")
        if M % self.block_m:
            raise ConfigError(f"k_threads > 1 needs block_m | M (its rows are not padded), "
                              f"got {M}x{N}x{K} with block_m {self.block_m}")
        if K % self.vector:
            raise ConfigError(f"k_threads > 1 needs vector | K (A's rows start {self.vector}-aligned), "
                              f"got K={K} with vector {self.vector}")

    def _validate_vector_matrix(self, M: int, N: int, K: int) -> None:
        """The rules of ``k_threads`` > 1 with block_n > 1, each a one-line ConfigError."""
        if self.k_threads & (self.k_threads - 1):
            raise ConfigError(f"k_threads must be 1 or a power of two, got {self.k_threads}")
        if M != 1:
            raise ConfigError(f"k_threads > 1 with block_n > 1 is for vector-matrix shapes (M = 1), got M={M}")
        _check_vector(self.vector)
        for name, value in {**self.VECTOR_MATRIX_FIXED, "thread_n": self.vector, "block_k": self.k_threads}.items():
            if getattr(self, name) != value:
                raise ConfigError(f"k_threads > 1 with block_n > 1 needs {name} {value}, got {getattr(self, name)}")
        if N % self.block_n or K % self.block_k:
            raise ConfigError(f"k_threads > 1 needs block_n | N and block_k | K (no padding), "
                              f"got {M}x{N}x{K} with block_n {self.block_n}, block_k {self.block_k}")

    def chunk_k(self, K: int) -> int:
        """The length of one K chunk: K / split_k rounded up to whole block_k slices."""
        per_chunk = -(-K // self.split_k)
        return -(-per_chunk // self.block_k) * self.block_k


# --- tensor cores (steps 12-14) ----------------------------------------------------------------
# mma.sync.m16n8k8 TF32: a warp multiplies 16 x 8 by 8 x 8; the steps tensorize 16 x 16 x 8
# tiles (two mma side by side along n), so warp tiles are multiples of 16 x 16 and block_k of 8.
MMA_TILE_M, MMA_TILE_N, MMA_TILE_K = 16, 16, 8
# 16-bit inputs (fp16, bf16): mma.sync.m16n8k16, tiles of 16 x 16 x 16, so block_k a multiple of
# 16; an element is 2 bytes, so a 16-byte copy moves 8 (vector up to 8) and a row pad that
# keeps rows 16-byte aligned is a multiple of 8 elements.
MMA_TILE_K16 = 16
ELEMENT_BYTES = {"fp32": FLOAT_BYTES, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class TensorCoreConfig(GridConfig):
    """Step 12: block_m x block_n per thread block, split into warp tiles of warp_m x warp_n,
    each a grid of 16 x 16 accumulators that the tensor cores update 8 k at a time; operands
    staged through shared memory block_k at a time, copied `vector` floats per load."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warp_m: int = 64  # type: ignore[assignment]
    warp_n: int = 64
    vector: int = 4
    # The inputs' dtype (DTYPES' names): "fp32" multiplies in TF32 on m16n8k8; "fp16" and "bf16"
    # on m16n8k16 with fp32 accumulation, C stored in the dtype. Sizes (block_k, vector, pads)
    # count elements of this dtype. Keyword-only, and left out of as_dict for fp32, so the fp32
    # configs read and print as they did before it existed.
    dtype: str = field(default="fp32", kw_only=True)

    def as_dict(self) -> dict:
        d = asdict(self)
        if d["dtype"] == "fp32":
            del d["dtype"]
        else:
            d["dtype"] = d.pop("dtype")
        return d

    @property
    def sixteen_bit(self) -> bool:
        return self.dtype != "fp32"

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def mma_k(self) -> int:
        """k of the tensorized tile: 8 (TF32, m16n8k8) or 16 (16-bit, m16n8k16)."""
        return MMA_TILE_K16 if self.sixteen_bit else MMA_TILE_K

    @property
    def warps(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n)

    @property
    def threads(self) -> int:
        return self.warps * WARP_SIZE

    @property
    def thread_axes(self) -> tuple[int, int]:
        return self.warps, WARP_SIZE

    @property
    def stages(self) -> int:
        return 1

    @property
    def pad_a(self) -> int:
        return 0

    @property
    def pad_b(self) -> int:
        return 0

    @property
    def operand_bytes(self) -> int:
        """One stage of the A and B tiles in shared memory, with their row padding."""
        a = self.block_m * (self.block_k + self.pad_a)
        b = self.block_k * (self.block_n + self.pad_b)
        return (a + b) * self.element_bytes

    @property
    def output_bytes(self) -> int:
        """The C tile staged in shared memory for coalesced, predicated global stores (fp32 for
        every dtype: 16-bit outputs are rounded as they leave it)."""
        return self.block_m * (self.block_n + self.pad_b) * FLOAT_BYTES

    @property
    def shared_bytes(self) -> int:
        # The operand stages are dead once the k loop ends and the C tile is staged after it:
        # TVM's MergeSharedMemoryAllocations gives both the same dynamic shared memory.
        return max(self.stages * self.operand_bytes, self.output_bytes)

    @property
    def shared_scope(self) -> str:
        return "shared.dyn"

    def validate(self, M: int, N: int, K: int) -> None:
        check_sizes(M, N, K)
        if self.dtype not in ELEMENT_BYTES:
            raise ConfigError(f"dtype must be one of {', '.join(ELEMENT_BYTES)}, got {self.dtype!r}")
        _check_integer_fields(self, lambda name: name.startswith("pad_") or name == "promote")
        for name, tile, unit in (("warp_m", self.warp_m, MMA_TILE_M), ("warp_n", self.warp_n, MMA_TILE_N),
                                 ("block_k", self.block_k, self.mma_k)):
            if tile % unit:
                if self.sixteen_bit:
                    raise ConfigError(f"{name} must be a multiple of {unit} for {self.dtype} (the tensorized "
                                      f"16 x 16 x 16 tile), got {tile}")
                raise ConfigError(f"{name} must be a multiple of {unit} (the tensorized tile), got {tile}")
        _divides("warp_m", self.warp_m, "block_m", self.block_m)
        _divides("warp_n", self.warp_n, "block_n", self.block_n)
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise ConfigError(f"{self.warps} warps ({self.threads} threads) per block exceeds the limit of "
                              f"{MAX_THREADS_PER_BLOCK} threads")
        if self.sixteen_bit:
            if self.vector not in (1, 2, 4, 8):
                raise ConfigError(f"vector must be 1, 2, 4 or 8 {self.dtype} elements (at most 16 bytes), "
                                  f"got {self.vector}")
        else:
            _check_vector(self.vector)
        per_round = self.threads * self.vector
        unit = "floats" if not self.sixteen_bit else "elements"
        for name, elems in (("A", self.block_m * self.block_k), ("B", self.block_k * self.block_n),
                            ("C", self.block_m * self.block_n)):
            if elems % per_round:
                raise ConfigError(f"the {name} tile ({elems} {unit}) must split evenly over "
                                  f"{self.threads} threads x vector {self.vector}")
        self.check_shared_memory("sm_90")


@dataclass(frozen=True)
class TensorCorePipelineConfig(TensorCoreConfig):
    """Step 13: `stages` cp.async buffers; A rows padded by pad_a floats and B rows by pad_b,
    so fragment loads hit distinct banks; blocks launched in groups `raster` wide; each warp's
    fragments in `fragment_buffers` register sets (2: the next 8-k step's, and the next slice's
    first, load while this step's mma run); `barriers` per k slice: 2 as TVM's ThreadSync
    places them, or 1 in CUTLASS's order (schedules/lowering/one_barrier.py, a pass after ThreadSync)."""

    stages: int = 3  # type: ignore[assignment]
    pad_a: int = 4  # type: ignore[assignment]
    pad_b: int = 8  # type: ignore[assignment]
    raster: int = 1  # type: ignore[assignment]
    fragment_buffers: int = 1
    barriers: int = 2

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.stages, int) or isinstance(self.stages, bool) or not 2 <= self.stages <= 5:
            raise ConfigError(f"stages must be 2 to 5, got {self.stages!r}")
        if self.fragment_buffers not in (1, 2) or isinstance(self.fragment_buffers, bool):
            raise ConfigError(f"fragment_buffers must be 1 or 2, got {self.fragment_buffers!r}")
        if self.barriers not in (1, 2) or isinstance(self.barriers, bool):
            raise ConfigError(f"barriers must be 1 or 2, got {self.barriers!r}")
        if self.fragment_buffers == 2 and self.stages < 3:
            # The next slice's first fragments load one stage after its copy lands: with 2
            # stages that copy is the one issued in the same iteration, so nothing overlaps.
            raise ConfigError(f"fragment_buffers 2 needs stages >= 3, got stages {self.stages}")
        for name in ("pad_a", "pad_b"):
            pad = getattr(self, name)
            if not isinstance(pad, int) or isinstance(pad, bool):
                continue
            if self.dtype in ("fp16", "bf16"):
                # 16 bytes, as fp32's 4 floats: rows stay aligned for cp.async and ldmatrix.
                if pad % 8 or pad >= 64:
                    raise ConfigError(f"{name} must be a multiple of 8 {self.dtype} elements below 64, got {pad}")
            elif pad % 4 or pad >= 32:
                raise ConfigError(f"{name} must be a multiple of 4 floats below 32, got {pad}")
        super().validate(M, N, K)  # sizes and fields first: the check below divides K by block_k
        if self.fragment_buffers == 2 and not self.fragments_double_buffer_at(K):
            raise ConfigError(f"fragment_buffers 2 needs at least stages - 1 = {self.stages - 1} slices of "
                              f"block_k {self.block_k} in K={K}, got {-(-K // self.block_k)}")

    def fragments_double_buffer_at(self, K: int) -> bool:
        """Whether K has the stages - 1 block_k slices fragment_buffers 2 needs: with fewer, TVM
        0.27 leaves the cp.async wait count of the nested pipeline's epilogue a run-time value,
        which its CUDA codegen rejects."""
        return -(-K // self.block_k) >= self.stages - 1


@dataclass(frozen=True)
class TF32x3Config(TensorCorePipelineConfig):
    """Step 14: step 13's config; the operands are split into big + small TF32 halves, and
    each 8-k step's three products go to a fresh accumulator added to C in fp32 (`promote` 1),
    or straight into C on the tensor core (0: faster, truncating, less accurate), or each
    block_k slice's products into a per-slice accumulator added to C in fp32 (2: block_k / 8
    times fewer fp32 adds than 1, a second warp-tile accumulator in registers)."""

    promote: int = 1

    def validate(self, M: int, N: int, K: int) -> None:
        if self.dtype != "fp32":
            raise ConfigError(f"step 14 splits fp32 operands: dtype must be fp32, got {self.dtype!r}")
        if self.promote not in (0, 1, 2) or isinstance(self.promote, bool):
            raise ConfigError(f"promote must be 0, 1 or 2, got {self.promote!r}")
        if self.fragment_buffers != 1:
            # Step 14's fragments are the split big/small halves (twice step 13's registers),
            # and with promote 2 a second warp-tile accumulator: no room for a second set.
            raise ConfigError(f"step 14 keeps one set of fragments: fragment_buffers must be 1, "
                              f"got {self.fragment_buffers!r}")
        super().validate(M, N, K)


# The Hopper rungs (schedules/transforms/wgmma.py). A k slice is one 128-byte swizzle row of floats; the
# consumer warpgroups each own 64 rows of the wgmma tile; wgmma's n runs to 256 and a TMA box's
# rows to 256, in 32s here (whole swizzle atoms, and step 18's 32-wide boxes of B).
WGMMA_K = 32
WGMMA_ROWS = 64
WGMMA_MAX_N = 256
WGMMA_MAX_CONSUMERS = 3  # two: 64 x 256 accumulators, 128 registers of the 232 a thread gets
# Three consumers (512 threads) get 152 registers a thread (wgmma.CONSUMER_REGS_OF_THREE), so their
# wgmma's n stops at 128 (64 accumulator registers). cuBLAS runs 1536^3 in 16-bit as 128 tiles of
# 192 x 96: 128 tiles of 96 x 192 on three consumers ran 1.15x (step 23) and 1.20x (step 22) the 96
# tiles of 192 x 128 on two (H200, 2026-11-29;
# git show 8f5fcb7:results/nvidia-h200/evidence/cluster_tiles_probe.txt).
WGMMA_THREE_MAX_N = 128


@dataclass(frozen=True)
class WgmmaConfig(GridConfig):
    """Step 15: block_m x block_n per thread block; block_m / 64 warpgroups each multiply a
    64 x block_n x 8 tile per wgmma, 32 k per slice loaded by TMA into one shared buffer;
    blocks launched in groups of `raster` tile rows (L2 reuse)."""

    block_m: int = 128
    block_n: int = 128
    raster: int = 8  # type: ignore[assignment]

    # What the rung's idea switches; the later configs change them.
    @property
    def stages(self) -> int:
        return 1

    @property
    def producer(self) -> bool:
        """A warpgroup of its own that only loads (warp specialization)."""
        return False

    @property
    def register_a(self) -> bool:
        """C^T = B^T A^T with B^T in registers (wgmma's register A), no transposed copy of B."""
        return False

    @property
    def split(self) -> bool:
        """3xTF32: three TF32 products per 8 k (big and small halves of each operand), summed in
        chunks of `promote` slices and promoted to a second accumulator in fp32."""
        return False

    @property
    def block_k(self) -> int:
        return WGMMA_K

    @property
    def wgmma_n(self) -> int:
        """The n of wgmma.m64nNk8: the tile side that is not split over warpgroups."""
        return self.block_m if self.register_a else self.block_n

    @property
    def consumers(self) -> int:
        """Warpgroups that multiply, 64 rows of the wgmma tile each."""
        return (self.block_n if self.register_a else self.block_m) // WGMMA_ROWS

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + int(self.producer))

    @property
    def operand_bytes(self) -> int:
        """Shared memory per stage: the A and B tiles TMA writes (and, split, A's small half)."""
        a_tiles = 2 if self.split else 1
        return (a_tiles * self.block_m + self.block_n) * WGMMA_K * FLOAT_BYTES

    @property
    def barriers(self) -> int:
        """mbarriers per stage: full and empty, and (split) ready: A's small half written."""
        return 3 if self.split else 2

    @property
    def shared_bytes(self) -> int:
        # The stages, and the 8-byte mbarriers of each stage after them.
        return self.stages * (self.operand_bytes + 8 * self.barriers)

    @property
    def shared_scope(self) -> str:
        return "shared.dyn"

    def validate(self, M: int, N: int, K: int) -> None:
        check_sizes(M, N, K)
        _check_integer_fields(self)
        rows_name, rows = ("block_n", self.block_n) if self.register_a else ("block_m", self.block_m)
        n_name, n = ("block_m", self.block_m) if self.register_a else ("block_n", self.block_n)
        allowed = [WGMMA_ROWS * c for c in range(1, WGMMA_MAX_CONSUMERS + 1)]
        if rows not in allowed:
            raise ConfigError(f"{rows_name} must be {' or '.join(map(str, allowed))} (64 rows per consumer "
                              f"warpgroup, at most {WGMMA_MAX_CONSUMERS}), got {rows}")
        if n % 32 or not 32 <= n <= WGMMA_MAX_N:
            raise ConfigError(f"{n_name} must be a multiple of 32 from 32 to {WGMMA_MAX_N} (wgmma's n), got {n}")
        if rows > 2 * WGMMA_ROWS and n > WGMMA_THREE_MAX_N:
            raise ConfigError(f"{n_name} must be at most {WGMMA_THREE_MAX_N} with three consumer warpgroups "
                              f"({rows_name} {rows}: 152 registers a thread), got {n}")
        self.check_shared_memory("sm_90")


# A ring as deep as shared memory allows for small tiles: cuBLAS's bf16 kernel at 4096 x 128 x
# 4096 runs 64 x 64 tiles in 13 stages of 64 k (Nsight Compute on an H200, 2026-11-28: 2.56 TB/s
# from DRAM against step 23's 8 stages' 1.97; step 26's docstring). Deeper than 8 is unmeasured here.
MAX_RING_STAGES = 16


@dataclass(frozen=True)
class WgmmaPipelineConfig(WgmmaConfig):
    """Steps 16 and 17: step 15's tile with `stages` shared buffers in a ring, filled by a
    producer warpgroup of its own while the consumer warpgroups multiply."""

    stages: int = 4  # type: ignore[assignment]

    @property
    def producer(self) -> bool:
        return True

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.stages, int) or isinstance(self.stages, bool) or not 2 <= self.stages <= MAX_RING_STAGES:
            raise ConfigError(f"stages must be 2 to {MAX_RING_STAGES}, got {self.stages!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaRegisterAConfig(WgmmaPipelineConfig):
    """Step 18: step 17's pipeline computing C^T = B^T A^T: block_n / 64 consumer warpgroups,
    each 64 columns of C (rows of C^T) by block_m, wgmma's register operand B^T."""

    block_m: int = 256
    block_n: int = 128
    stages: int = 4  # type: ignore[assignment]

    @property
    def register_a(self) -> bool:
        return True


# 3xTF32 on wgmma keeps a second accumulator beside wgmma's and the B^T fragments of two slices,
# big and small: block_m / 2 * 2 + 64 registers a thread of the 232 a consumer has.
WGMMA_SPLIT_MAX_N = 128


@dataclass(frozen=True)
class Wgmma3xTF32Config(WgmmaRegisterAConfig):
    """Step 19: step 18's kernel computing 3xTF32. A producer warpgroup writes each A tile's small
    half beside it (once per shared tile); consumers split their B^T fragments in registers and
    issue three wgmma per 8 k into an accumulator restarted every `promote` slices, whose sum
    is added in fp32 to a second one."""

    block_m: int = 128
    block_n: int = 128
    stages: int = 4  # type: ignore[assignment]
    promote: int = 1  # as fast as 2 and 4 on the H100, and the most accurate (step 19's docstring)

    @property
    def split(self) -> bool:
        return True

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.promote, int) or isinstance(self.promote, bool) or not 1 <= self.promote <= 8:
            raise ConfigError(f"promote must be 1 to 8 slices, got {self.promote!r}")
        if isinstance(self.block_n, int) and not isinstance(self.block_n, bool) and self.block_n > 2 * WGMMA_ROWS:
            raise ConfigError(f"block_n must be 64 or 128 for 3xTF32 and 3xFP16 (two accumulators and the fragments "
                              f"need two consumers' registers, 232 a thread), got {self.block_n}")
        if isinstance(self.block_m, int) and not isinstance(self.block_m, bool) and self.block_m > WGMMA_SPLIT_MAX_N:
            raise ConfigError(f"block_m must be at most {WGMMA_SPLIT_MAX_N} for 3xTF32 (two accumulators of "
                              f"block_m / 2 registers and 64 of fragments a thread, 232 allowed), got {self.block_m}")
        super().validate(M, N, K)


# The H100 SXM and the H200 have 132 SMs: a persistent grid launches one block per SM.
HOPPER_SMS = 132


@dataclass(frozen=True)
class WgmmaPersistentConfig(WgmmaRegisterAConfig):
    """Step 20: step 18's kernel on a persistent grid: min(tiles, `ctas`) blocks, each walking
    the output tiles bid, bid + ctas, ... in the raster order, its producer loading the next
    tile's slices while the consumers store the last."""

    ctas: int = HOPPER_SMS

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.ctas, int) or isinstance(self.ctas, bool) or not 1 <= self.ctas <= 1024:
            raise ConfigError(f"ctas must be 1 to 1024 blocks (one per SM: {HOPPER_SMS} on an H100), got {self.ctas!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class Wgmma3xTF32PersistentConfig(Wgmma3xTF32Config, WgmmaPersistentConfig):
    """Step 25: step 19's 3xTF32 kernel on step 20's persistent grid: min(tiles, `ctas`) blocks
    walk the tiles; the producer's loads and its helpers' splits run on into the next tile
    while the consumers store and test the last one's fp32 total."""


@dataclass(frozen=True)
class Wgmma3xFP16Config(Wgmma3xTF32PersistentConfig):
    """Step 28: step 25's fields for fp32-accurate products from three fp16 ones: A and B scaled by
    a power of two per row of A and column of B, split into fp16 halves (hi, lo) by copy kernels
    before the GEMM; step 20's persistent kernel loads both halves of each (four tiles a stage) and
    issues three fp16 wgmma per 16 k into an accumulator restarted every `promote` slices, added
    in fp32 to a total, which the store scales back. No split in shared memory (``split``: the
    copies wrote both halves), so no helper warps and no "ready" barrier."""

    stages: int = 3  # type: ignore[assignment]
    promote: int = 1

    @property
    def split(self) -> bool:
        return False

    @property
    def operand_bytes(self) -> int:
        """Both halves of A's and B's tiles: 64 KB a stage at 128 x 128 (a slice is 64 k of fp16,
        the 128 bytes of step 19's 32 floats)."""
        return 2 * (self.block_m + self.block_n) * WGMMA_K * FLOAT_BYTES

    def validate(self, M: int, N: int, K: int) -> None:
        if isinstance(self.block_m, int) and not isinstance(self.block_m, bool) and self.block_m > WGMMA_SPLIT_MAX_N:
            raise ConfigError(f"block_m must be at most {WGMMA_SPLIT_MAX_N} for 3xFP16 (the accumulator and the fp32 "
                              f"total, block_m / 2 registers a thread each), got {self.block_m}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaSplitKConfig(WgmmaPersistentConfig):
    """Step 23: step 20's persistent kernel whose units of work are a tile and one of `split`
    equal ranges of K (`split_k`); each unit's fp32 partial sum goes to a workspace that a second kernel
    sums into C. split_k 1 is step 20's kernel."""

    split_k: int = 1

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.split_k, int) or isinstance(self.split_k, bool) or not 1 <= self.split_k <= 256:
            raise ConfigError(f"split_k must be 1 to 256 parts of K, got {self.split_k!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaDependentLaunchConfig(WgmmaSplitKConfig):
    """Step 29: step 23's config; its kernels launched with programmatic dependent launch, each
    waiting for its predecessor at its top."""


# Step 26's partial sums in shared memory: block_m rows of block_n fp32 values and this many more,
# so the rows of one 8-row group of accumulator registers fall in different banks.
PARTIAL_PAD = 4
CLUSTER_SPLITS = (2, 4, 8)  # blocks per cluster (8: the portable cluster size)


@dataclass(frozen=True)
class WgmmaClusterSplitConfig(WgmmaSplitKConfig):
    """Step 26: step 23's split of K, its parts on the `split_k` blocks of a cluster, one block per
    part of one tile (a block per (tile, part), not a persistent walk: `ctas` is unused); each writes its
    fp32 partial sum to its own shared memory and adds a slice of the tile's rows from all of them
    (distributed shared memory) into C."""

    block_m: int = 128
    block_n: int = 64
    stages: int = 8  # type: ignore[assignment]
    split_k: int = 4

    @property
    def partial_bytes(self) -> int:
        return self.block_m * (self.block_n + PARTIAL_PAD) * FLOAT_BYTES

    @property
    def shared_bytes(self) -> int:
        return super().shared_bytes + self.partial_bytes

    def validate(self, M: int, N: int, K: int) -> None:
        if self.split_k not in CLUSTER_SPLITS or isinstance(self.split_k, bool):
            raise ConfigError(f"split_k must be {', '.join(map(str, CLUSTER_SPLITS))} (the blocks of a cluster), "
                              f"got {self.split_k!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaClusterConfig(WgmmaPersistentConfig):
    """Step 21: step 20's persistent kernel in clusters of two blocks side by side in N (the same
    block_m rows of A, two block_n column tiles of B); block 0 of each cluster loads A's tile into
    both blocks' shared memory with one multicast TMA."""

    def validate(self, M: int, N: int, K: int) -> None:
        if isinstance(self.ctas, int) and not isinstance(self.ctas, bool) and self.ctas % 2:
            raise ConfigError(f"ctas must be even (clusters of two blocks), got {self.ctas}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaTmaStoreConfig(WgmmaClusterConfig):
    """Step 22: step 21's kernel whose consumers write C through shared memory: each stages its
    64 columns of the tile in chunks of `chunk` bytes that one thread stores with a TMA store.
    The default, 16 KB, fits beside the four 48 KB stages of the ring (196,608 + 2 x 16,384 of
    the 232,448 bytes an H100 gives a block); with 3 stages a consumer's whole part of a 16-bit
    tile (32 KB) fits in one chunk."""

    chunk: int = 16384

    @property
    def shared_bytes(self) -> int:
        return super().shared_bytes + self.consumers * self.chunk

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.chunk, int) or isinstance(self.chunk, bool) or self.chunk not in (8192, 16384, 32768, 65536):
            raise ConfigError(f"chunk must be 8192, 16384, 32768 or 65536 bytes, got {self.chunk!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaStreamKConfig(WgmmaTmaStoreConfig):
    """Step 27: step 22's kernel, except where the pairs of tiles do not divide evenly over the
    clusters (ctas / 2) and the last wave and one more, the pairs it streams (cuts into equal ranges
    of K slices, one per cluster), are at most 1 / `stream_share` of all pairs; 1: wherever they do
    not divide evenly."""

    stream_share: int = 8

    def validate(self, M: int, N: int, K: int) -> None:
        if not isinstance(self.stream_share, int) or isinstance(self.stream_share, bool) or not 1 <= self.stream_share <= 64:
            raise ConfigError(f"stream_share must be 1 to 64 (stream where the streamed pairs are at most 1/stream_share "
                              f"of all), got {self.stream_share!r}")
        super().validate(M, N, K)


@dataclass(frozen=True)
class WgmmaDependentClusterSplitConfig(WgmmaClusterSplitConfig):
    """Step 30: step 26's config; its kernel launched as step 29 launches step 23's."""


@dataclass(frozen=True)
class WgmmaDependentStreamKConfig(WgmmaStreamKConfig):
    """Step 31: step 27's config; its kernel launched as step 29 launches step 23's."""


@dataclass(frozen=True)
class MatvecConfig:
    """Step 24 (M <= 16; larger M 16 rows at a time): a block of lanes_n x lanes_k threads; each thread streams a 16-byte
    vector of B's columns down its own range of K (`unroll` rows a turn, their loads in flight
    together), the block's lanes_k partial sums added through shared memory. Its mirror (N <= 16 < M,
    rows of A streamed): lanes_n rows of A a block, lanes_k threads side by side along each row
    (a power of two), `unroll` 16-byte vectors of the row in flight a thread."""

    lanes_n: int = 8
    lanes_k: int = 32
    unroll: int = 4

    as_dict = GridConfig.as_dict
    from_dict = GridConfig.__dict__["from_dict"]

    @property
    def threads(self) -> int:
        return self.lanes_n * self.lanes_k

    def chunk_k(self, K: int) -> int:
        """The k one thread's accumulator sums serially (schedules/lowering/long_k.py)."""
        return -(-K // self.lanes_k)

    @property
    def shared_bytes(self) -> int:
        return 0  # sized by M and the dtype: step24_matvec.shared_bytes, checked before the kernel is built

    @property
    def shared_scope(self) -> str:
        return "shared"

    def check_shared_memory(self, arch: str = "sm_90") -> None:
        pass  # step 24's kernel checks its partial sums' bytes (they depend on M and the dtype)

    def validate(self, M: int, N: int, K: int) -> None:
        check_sizes(M, N, K)
        _check_integer_fields(self)
        if self.lanes_n not in (1, 2, 4, 8, 16, 32):
            raise ConfigError(f"lanes_n must be 1, 2, 4, 8, 16 or 32 threads, got {self.lanes_n}")
        if self.threads % WARP_SIZE or not WARP_SIZE <= self.threads <= 1024:
            raise ConfigError(f"lanes_n x lanes_k must be whole warps, 32 to 1024 threads, got {self.threads}")
        if self.unroll not in (1, 2, 4, 8, 16):
            raise ConfigError(f"unroll must be 1, 2, 4, 8 or 16 rows, got {self.unroll}")

