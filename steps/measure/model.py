"""A real model through TVM three ways: with the ladder's kernels, with dlight's defaults, and PyTorch eager.

The model is a transformer block's linear layers, fp32 (or, with `dtype`, fp16 / bf16: weights,
input and every tensor of the block in that dtype), random weights (no download):

    q, k, v = split(qkv(x))           qkv:  Linear(d, 3d)
    h = x + o(q * k + v)              o:    Linear(d, d)
    y = h + down(gelu(up(h)))         up:   Linear(d, 4d), down: Linear(4d, d)

Every Linear has a bias; GELU is the erf form (torch's default). With ``mlp="swiglu"`` the MLP is
LLaMA's gated one instead, its Linears without bias and its width F = 8d/3 rounded up to 256
(2816 at d 1024; 11008 at d 4096, LLaMA-7B's):

    y = h + down(silu(gate(h)) * up(h))   gate, up: Linear(d, F), down: Linear(F, d)

which the ladder's Relax pass turns into two kernels, W_up's product and W_gate's whose store
applies silu and the multiply (relax_dispatch.epilogue_chains), then W_down's. The attention core,
softmax(q k^T) v over heads, is left out: its batched products are not the layouts this model
exercises, and ``q * k + v`` in its place keeps all three projections live at the same cost
in matmuls. At T tokens the four products are T x 3d x d, T x d x d, T x 4d x d and T x d x 4d.

It is defined twice with the same weights: in Relax's ``nn`` frontend (always available: the
CI path) and in PyTorch (``torch_block``), whose exported program Relax imports with
``tvm.relax.frontend.torch.from_exported_program`` where torch is installed. Both give the same
Relax module up to names. Each is compiled after ``LiftTransformParams`` (the weights'
transposes, nn.Linear's W^T, run once when the weights are loaded, not in every forward pass:
what every TVM deployment does), then either through the ladder's pipeline
(``schedules.integration.relax_dispatch.pipeline``: each matmul whose pick is a Hopper kernel placed at the
Relax level, the others scheduled by the dlight rule ``LadderMatmul`` with their bias, GELU and
residual add fused into the store) or through TVM's default pipeline (dlight's rules for every
kernel).
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes

MLPS = ("gelu", "swiglu")


def swiglu_width(d: int) -> int:
    """LLaMA's gated MLP width: int(8d/3) rounded up to a multiple of 256 (the same weights as 4d
    in two Linears, in three)."""
    return 256 * -(-(8 * d // 3) // 256)


def layers(d: int, mlp: str = "gelu") -> list[tuple[str, int, int, bool]]:
    """The block's Linears: (name, out features, in features, has a bias)."""
    attention = [("qkv", 3 * d, d, True), ("o", d, d, True)]
    if mlp == "gelu":
        return attention + [("up", 4 * d, d, True), ("down", d, 4 * d, True)]
    f = swiglu_width(d)
    return attention + [("gate", f, d, False), ("up", f, d, False), ("down", d, f, False)]


def weights(d: int, seed: int = 0, dtype: str = "fp32", mlp: str = "gelu") -> dict[str, np.ndarray]:
    """nn.Linear's layout and initialisation: W [out, in] and b [out], uniform in +-1/sqrt(in),
    drawn in fp32 and rounded to `dtype` (held as dtypes.py's host storage: bf16 as bit patterns)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, o, i, bias in layers(d, mlp):
        bound = 1 / math.sqrt(i)
        out[f"{name}.weight"] = dtypes.from_float32(rng.uniform(-bound, bound, (o, i)).astype(np.float32), dtype)
        if bias:
            out[f"{name}.bias"] = dtypes.from_float32(rng.uniform(-bound, bound, (o,)).astype(np.float32), dtype)
    return out


def reference(x: np.ndarray, w: dict[str, np.ndarray], dtype: str = "fp32") -> np.ndarray:
    """The block in float64 (numpy) on the very `dtype` values of x and w: what every way is
    checked against."""
    from math import sqrt

    def linear(v, name):
        v = v @ dtypes.to_float64(w[f"{name}.weight"], dtype).T
        return v + dtypes.to_float64(w[f"{name}.bias"], dtype) if f"{name}.bias" in w else v

    def gelu(v):
        try:
            from scipy.special import erf
        except ImportError:
            erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * v * (1 + erf(v / sqrt(2)))

    x = dtypes.to_float64(x, dtype)
    q, k, v = np.split(linear(x, "qkv"), 3, axis=-1)
    h = x + linear(q * k + v, "o")
    if "gate.weight" in w:  # the gated MLP
        g = linear(h, "gate")
        return h + linear(g / (1 + np.exp(-g)) * linear(h, "up"), "down")
    return h + linear(gelu(linear(h, "up")), "down")


def relax_block(d: int, tokens: int, w: dict[str, np.ndarray] | None = None, dtype: str = "fp32",
                mlp: str = "gelu"):
    """The block in Relax's nn frontend, its tensors in `dtype`: (IRModule, its entry function's
    name, the weights of `w` in the order it takes them after its input; [] without `w`)."""
    from tvm.relax.frontend import nn

    dt = dtypes.tvm_dtype(dtype)

    class Block(nn.Module):
        def __init__(self):
            for name, o, i, bias in layers(d, mlp):
                setattr(self, name, nn.Linear(i, o, bias=bias, dtype=dt))

        def forward(self, x):
            q, k, v = nn.op.split(self.qkv(x), 3, axis=-1)
            h = x + self.o(q * k + v)
            if mlp == "swiglu":
                return h + self.down(nn.op.silu(self.gate(h)) * self.up(h))
            return h + self.down(nn.op.gelu(self.up(h)))

    mod, params = Block().export_tvm(spec={"forward": {"x": nn.spec.Tensor((1, tokens, d), dt)}})
    return mod, "forward", [w[name] for name, _ in params] if w is not None else []


TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_block(d: int, w: dict[str, np.ndarray], dtype: str = "fp32", mlp: str = "gelu"):
    """The same block as a torch.nn.Module in `dtype`, with the weights of `w` (torch needed)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, o, i, bias in layers(d, mlp):
                setattr(self, name, torch.nn.Linear(i, o, bias=bias))

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            h = x + self.o(q * k + v)
            if mlp == "swiglu":
                return h + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))
            return h + self.down(torch.nn.functional.gelu(self.up(h)))

    block = Block().to(getattr(torch, TORCH_DTYPES[dtype]))
    with torch.no_grad():
        for name, value in w.items():  # exact: every value is one of the dtype's
            block.get_parameter(name).copy_(torch.from_numpy(dtypes.to_float64(value, dtype)))
    return block.eval()


def torch_relax_block(d: int, tokens: int, w: dict[str, np.ndarray], mlp: str = "gelu"):
    """The torch block imported into Relax (torch.export, then from_exported_program, weights
    kept as inputs and detached): (IRModule, entry function's name, weights in its order)."""
    import torch
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    block = torch_block(d, w, mlp=mlp)
    exported = torch.export.export(block, (torch.zeros(1, tokens, d),))
    mod, params = detach_params(from_exported_program(exported, keep_params_as_input=True))
    func = mod["main"]
    if func.attrs is None or "num_input" not in func.attrs:  # what LiftTransformParams reads
        mod["main"] = func.with_attr("num_input", 1)
    return mod, "main", [p.numpy() for p in params["main"]]


# TVM's own switch for replaying a forward pass's kernels from a CUDA graph (RewriteCUDAGraph,
# in both pipelines): one launch per call instead of one per kernel, the host's share of a
# small forward pass gone. The same for both TVM ways when asked (steps.model --cuda-graph).
CUDA_GRAPH = {"relax.backend.use_cuda_graph": True}


def compile_block(mod, way: str, arch: str, cuda_graph: bool = False, precision: str = "fp32", gpu: str | None = None):
    """mod compiled the `way` asked: "ladder" (schedules.integration.relax_dispatch.pipeline: the Hopper
    kernels placed at the Relax level, the dlight rule LadderMatmul for the rest, epilogues
    fused; `precision`: the dispatch table's, fp32 or a 16-bit block's dtype, whose every pick is
    placed at the Relax level) or "dlight" (TVM's default CUDA pipeline); with `cuda_graph`, its kernels replayed
    from a CUDA graph (CUDA_GRAPH); `gpu`: whose rows of the dispatch table (``schedules.dispatch.gpu_entry``;
    None: the first of the arch's family). Returns (executable, [(M, N, K), step] per distinct matmul
    the ladder took)."""
    import tvm
    from tvm import relax

    import schedules
    from schedules.integration import relax_dispatch

    graph = CUDA_GRAPH if cuda_graph else {}
    mod = relax.transform.LiftTransformParams()(mod)
    if way == "dlight":
        with tvm.transform.PassContext(opt_level=3, config=graph):
            return tvm.compile(mod, target=schedules.target(arch)), []
    relax_pipeline, dispatch, rule = relax_dispatch.pipeline(arch, precision, gpu)
    with tvm.transform.PassContext(opt_level=3, config={**relax_dispatch.PASS_CONFIG, **graph}):
        ex = tvm.compile(mod, target=schedules.target(arch), relax_pipeline=relax_pipeline)
    chosen = list(dispatch.chosen) + [(mnk, step) for mnk, step, _ in rule.chosen]
    return ex, chosen
