"""Step configurations: one dataclass per idea, each extending the one before it.

A config is checked against the problem size before anything is built, so a bad tile gets a
one-line ``ConfigError`` naming the broken constraint instead of a TVM traceback or a kernel
that fails to load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

MAX_THREADS_PER_BLOCK = 1024
# Static __shared__ arrays above 48 KB are rejected by ptxas / at load; larger tiles would
# need dynamic shared memory, which these steps do not use.
MAX_STATIC_SHARED_BYTES = 48 * 1024
FLOAT_BYTES = 4


class ConfigError(ValueError):
    """A size or tile configuration that cannot be built; the message is one line."""


def check_sizes(M: int, N: int, K: int) -> None:
    for name, value in (("M", M), ("N", N), ("K", K)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")


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

    def validate(self, M: int, N: int, K: int) -> None:
        check_sizes(M, N, K)
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{f.name} must be a positive integer, got {value!r}")
        _divides("block_m", self.block_m, "M", M)
        _divides("block_n", self.block_n, "N", N)
        _divides("thread_m", self.thread_m, "block_m", self.block_m)
        _divides("thread_n", self.thread_n, "block_n", self.block_n)
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise ConfigError(
                f"{self.threads} threads per block ({self.threads_m}x{self.threads_n}) "
                f"exceeds the limit of {MAX_THREADS_PER_BLOCK}"
            )
        if self.shared_bytes > MAX_STATIC_SHARED_BYTES:
            raise ConfigError(
                f"{self.shared_bytes} bytes of shared memory per block exceeds the "
                f"{MAX_STATIC_SHARED_BYTES}-byte static limit"
            )


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

    def validate(self, M: int, N: int, K: int) -> None:
        super().validate(M, N, K)
        _divides("block_k", self.block_k, "K", K)


@dataclass(frozen=True)
class CooperativeFetchConfig(SharedTileConfig):
    """Step 4: the block's threads share the tile copy, `vector` floats per load."""

    vector: int = 4

    def validate(self, M: int, N: int, K: int) -> None:
        super().validate(M, N, K)
        if self.vector not in (1, 2, 4):
            raise ConfigError(f"vector must be 1, 2 or 4 floats (at most 16 bytes), got {self.vector}")
        # Each copied row must be whole vectors, and every thread must copy the same number.
        _divides("vector", self.vector, "block_k", self.block_k)
        _divides("vector", self.vector, "block_n", self.block_n)
        _divides("vector", self.vector, "K", K)
        _divides("vector", self.vector, "N", N)
        per_round = self.threads * self.vector
        for name, elems in (("A", self.block_m * self.block_k), ("B", self.block_k * self.block_n)):
            if elems % per_round:
                raise ConfigError(
                    f"the {name} tile ({elems} floats) must split evenly over "
                    f"{self.threads} threads x vector {self.vector}"
                )
