"""A fused epilogue: ``D = act(alpha * (A @ B) + bias + beta * C_in)`` in the matmul's own store.

What a model needs after a product (a Linear layer's bias, its activation, a GEMM's alpha and
beta) is elementwise over C. As a kernel of its own it reads C back from memory and writes D:
at 4096^2 that is 128 MiB more traffic, about 40 us on an H100's 3.35 TB/s, against a 4096^3
matmul of 1.1-3 ms, and it is a second launch. TensorIR can put it where C is already in
registers: ``matmul_epilogue`` (schedules/matmul.py) writes the elementwise block after the
product (C becomes an intermediate buffer), the step schedules the product as always, and
``fuse`` calls ``reverse_compute_inline`` on it, which rewrites the
step's write-back (``C_local`` -> global) to store ``act(alpha * acc + bias[j] + beta * C_in)``
instead of ``acc``: no buffer between them, one kernel. Where the write-back is a reduction
(split-K's sum of partials) ``reverse_compute_inline`` cannot apply, and the epilogue goes
under that kernel's thread loop with ``reverse_compute_at``: still one store of D per element.

Prediction: the fused kernel costs what the bare one does plus the epilogue's reads (bias, a
row of N floats per tile, cached; C_in where beta is nonzero, one read of M*N) and its math
(an erf for GELU per element, about 20 instructions, against K FMAs per element): under 1% at
2048^3 and 4096^3 without C_in; the separate kernel costs the 2 * 4 * M * N bytes above.

Measured (python -m steps.epilogue --save, step 11, bias + GELU, H100 80GB HBM3, 2026-11-25,
6 alternating rounds of 30 samples, kernel time; results/nvidia-h100-80gb-hbm3/epilogue.txt):
fused over bare 1.019 at 2048^3 (0.391 against 0.384 ms) and 0.999 at 4096^3 (3.048 against
3.049 ms); the separate kernel 1.021 / 1.012 over the fused one (+8 / +36 us: 32 and 128 MiB
of traffic, at about 4 TB/s, as predicted). At 2048^3 the fused cost is above the prediction:
the erf and its operands take registers in the store's loop, which runs once per thread, so a
launch of 0.38 ms sees it as 7 us; at 4096^3 it is lost in the noise. Errors 8.1e-7 / 1.1e-6.

The Hopper rungs 19-23 and 25-28 write their kernels, so ``reverse_compute_inline`` has no store
to rewrite: their store applies ``Epilogue.value`` itself (schedules/transforms/wgmma.py,
``FusedOutput`` and ``stored``; step 22 as it stages the tile for its TMA store), in fp16 and bf16
too (the fp32-accurate rungs 19, 25 and 28: fp32 only, the epilogue after the fallback's test of
the raw total, step 19's ``store_split``, step 28's ``store_unscaled``). There the same epilogue cost 23-25% over the bare kernel in step 20's register store and
12-13% in step 22's staged one; a bias alone 8-9% and 1-3% (bf16 and fp16, 4096^3, H200,
2026-11-28): the store runs while the consumers' wgmma do not (docs/models.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx

from ..config import ConfigError

ACTIVATIONS = (None, "relu", "gelu", "silu")
SQRT1_2 = 0.7071067811865476


@dataclass(frozen=True)
class Epilogue:
    """What follows the product: ``D = act(alpha * acc + bias[j] + beta * C_in[i, j])``, or with
    `gate`, ``D = act(alpha * acc + bias[j]) * C_in[i, j]``: the second product of a gated pair
    (a SwiGLU MLP's ``silu(x W_g) * (x W_u)``: one product stores ``silu(acc)``, the other
    multiplies its own sums by that, so the pair is two kernels and no elementwise one)."""

    bias: bool = False
    activation: str | None = None  # None, "relu", "gelu" (erf form, as torch's default), "silu" (x * sigmoid(x))
    alpha: float = 1.0
    beta: float = 0.0
    gate: bool = False

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of relu, gelu, silu or none, got {self.activation!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ConfigError(f"{name} must be a number, got {value!r}")
        if not isinstance(self.gate, bool):
            raise ConfigError(f"gate must be True or False, got {self.gate!r}")
        if self.gate and self.beta != 0:
            raise ConfigError("C_in is either added (beta) or a gate that multiplies, not both")

    @property
    def reads_c(self) -> bool:
        return self.beta != 0 or self.gate

    @property
    def is_identity(self) -> bool:
        return not self.bias and self.activation is None and self.alpha == 1 and not self.reads_c

    def params(self) -> tuple[str, ...]:
        """The kernel's parameters, in order: A, B, then what the epilogue reads, then D."""
        return ("A", "B") + (("bias",) if self.bias else ()) + (("C_in",) if self.reads_c else ()) + ("D",)

    def tag(self) -> str:
        """A name for file and function names: what it has, in order (bias, res, the activation,
        gate, alpha), or "none"."""
        parts = [t for t, on in (("bias", self.bias), ("res", self.beta != 0), (self.activation or "", self.activation),
                                 ("gate", self.gate), ("alpha", self.alpha != 1)) if on]
        return "_".join(parts) or "none"

    def describe(self) -> str:
        terms = [f"{self.alpha:g}*acc" if self.alpha != 1 else "acc"]
        if self.bias:
            terms.append("bias")
        if self.beta != 0:
            terms.append(f"{self.beta:g}*C_in")
        body = " + ".join(terms)
        body = f"{self.activation}({body})" if self.activation else body
        return f"{body} * C_in" if self.gate else body

    def value(self, acc, i, j, bias=None, c_in=None):
        """The expression for one element: TIR `acc` (fp32) at row i, column j; 16-bit bias and
        C_in are read as fp32 (the Hopper rungs' fused epilogue in fp16 and bf16)."""
        f32 = lambda x: tirx.const(float(x), "float32")  # noqa: E731
        wide = lambda buf, *at: buf[at] if buf.dtype == "float32" else tirx.Cast("float32", buf[at])  # noqa: E731
        v = acc if self.alpha == 1 else acc * f32(self.alpha)
        if self.bias:
            v = v + wide(bias, j)
        if self.beta != 0:
            v = v + wide(c_in, i, j) * f32(self.beta)
        if self.activation == "relu":
            v = tirx.max(v, f32(0))
        elif self.activation == "gelu":
            v = f32(0.5) * v * (f32(1) + tirx.erf(v * f32(SQRT1_2)))
        elif self.activation == "silu":
            v = v / (f32(1) + tirx.exp(-v))  # exp overflows to inf for v < -88: -0, as torch gives
        if self.gate:
            v = v * wide(c_in, i, j)
        return v


def fuse(sch: s_tir.Schedule, compute: s_tir.SBlockRV, thread_loop) -> None:
    """Fold the ``epilogue`` block into the kernel's store of C (after the step's schedule).

    `compute` is the step's compute block and `thread_loop` its innermost per-thread loop
    (``Tiles.thread_j``), where the epilogue goes when the step has no write-back of its own."""
    block = sch.get_sblock("epilogue")
    producers = sch.get_producers(block)
    if any(sch.get(p).same_as(sch.get(compute)) for p in producers):
        # Steps 1-4 accumulate in C itself: the epilogue under the thread's micro-tile, and the
        # accumulator into registers (what padding does with C's copy-out, schedules/transforms/padding.py).
        sch.reverse_compute_at(block, thread_loop)
        sch.set_scope(compute, 0, "local")
        return
    try:
        sch.reverse_compute_inline(block)  # the write-back stores D instead of C
        return
    except s_tir.ScheduleError:
        pass
    # The store of C is a reduction (split-K's sum of the partials): under its thread loop.
    loops = sch.get_loops(producers[-1])
    bound = [lp for lp in loops if sch.get(lp).thread_binding is not None
             and str(sch.get(lp).thread_binding.thread_tag).startswith("threadIdx")]
    sch.reverse_compute_at(block, bound[-1] if bound else loops[-1])


def separate(sch: s_tir.Schedule, threads: int = 256) -> None:
    """The epilogue as a kernel of its own (the comparison ``fuse`` is measured against):
    one element per thread, coalesced."""
    separate_block(sch, sch.get_sblock("epilogue"), threads)


def separate_block(sch: s_tir.Schedule, block, threads: int = 256) -> None:
    """An elementwise block as a kernel of its own, one element per thread."""
    fused = sch.fuse(*sch.get_loops(block))
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
