"""A 16-bit model through the ladder without a GPU (issue 50): the block in bf16 and fp16, the
Relax pass in 16-bit (what it rewrites, what it leaves to dlight, that the module builds for
sm_90a with the ladder's 16-bit kernels in it), python -m steps.model --dtype's bounds, bars
and files. On a GPU: tests/test_gpu_model.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax

import schedules
from schedules.integration import relax_dispatch
from steps.commands import model as command
from steps.measure import dtypes
from steps.measure import model as block

from . import checks
from .checks import one_line_error

SHAPES = [(1024, 3072, 1024), (1024, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)]


def _lifted(dtype, d=1024, tokens=1024):
    return relax.transform.LiftTransformParams()(block.relax_block(d, tokens, dtype=dtype)[0])


@pytest.mark.parametrize("dtype, tvm_dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_the_block_is_built_in_the_dtype_and_its_reference_reads_the_dtypes_values(dtype, tvm_dtype):
    d, tokens = 64, 4
    w = block.weights(d, 1, dtype)
    assert all(v.dtype == dtypes.STORAGE[dtype] for v in w.values())
    mod, entry, params = block.relax_block(d, tokens, w, dtype)
    assert f'"{tvm_dtype}"' in mod[entry].script() and '"float32"' not in mod[entry].script()
    x = dtypes.from_float32(np.random.default_rng(3).uniform(-1, 1, (1, tokens, d)).astype(np.float32), dtype)
    ref = block.reference(x, w, dtype)
    as64 = {k: dtypes.to_float64(v, dtype) for k, v in w.items()}
    assert np.array_equal(ref, block.reference(dtypes.to_float64(x, dtype), as64))  # the same float64 block
    # and rounding to the dtype moved the weights: the fp32 draw and the 16-bit ones differ
    assert not np.array_equal(as64["qkv.weight"], block.weights(d, 1)["qkv.weight"].astype(np.float64))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_16_bit_matmul_the_ladder_can_build_gets_its_16_bit_kernel(dtype):
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision=dtype)
    mod = dispatch(_lifted(dtype))
    used = relax_dispatch.steps_used(mod)
    assert dispatch.chosen and set(mnk for mnk, _ in dispatch.chosen) <= set(SHAPES)
    for (M, N, K), step in dispatch.chosen:
        expected = schedules.dispatch.choose(M, N, K, dtype, "sm_90", schedules.STEPS,
                                             allow=lambda s: relax_dispatch.in_model(s, M, N, K, dtype))
        # Every product of the block has a bias after it: the kernel that stores it with one.
        fused = relax_dispatch.epilogue_step(expected.step, expected.config, M, N, K, dtype)
        assert step == (fused[0] if fused else expected.step).number and dtype in schedules.get_step(step).dtypes
        (name,) = [n for n in used if n.startswith(f"ladder_step{step}_{M}x{N}x{K}_{dtype}")]
        tensor = relax_dispatch.TENSOR_DTYPE[dtype]
        operands = _operands(mod[name])
        assert len(operands) == 3 + ("_bias" in name) + ("_res" in name)  # A, B, [bias], [C_in], D
        assert all(str(p.dtype) == tensor for p in operands)  # all in the dtype
        assert used[name] == step
    # What is not rewritten is a matmul no allowed step builds in a model: it stays for dlight.
    text = mod["forward"].script()
    assert text.count("R.call_tir(ladder_step") == len(dispatch.chosen)
    assert text.count("R.matmul") == len(SHAPES) - len(dispatch.chosen)


def _names(mod):
    return sorted(relax_dispatch.steps_used(mod))


def _operands(fn):
    """A ladder kernel's parameters up to its output D; after D come the buffers of scratch the
    pass made outputs of the call (schedules/integration/scratch.py, tests/test_scratch.py)."""
    names = [p.name for p in fn.params]
    return fn.params[: names.index("D") + 1]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_blocks_bias_gelu_and_residual_adds_go_into_the_hopper_kernels_store(dtype):
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision=dtype)
    mod = dispatch(relax.transform.LiftTransformParams()(block.relax_block(1024, 4096, dtype=dtype)[0]))
    # qkv: bias (a split reads it); o and down: bias and the residual; up: bias and GELU. At 4096
    # tokens every pick is a register-store rung, so each goes through step 22's TMA store.
    assert _names(mod) == sorted(f"ladder_step22_4096x{n}x{k}_{dtype}_{tag}" for n, k, tag in [
        (3072, 1024, "bias"), (1024, 1024, "bias_res"), (4096, 1024, "bias_gelu"), (1024, 4096, "bias_res")])
    text = mod["forward"].script()
    assert "R.nn.gelu" not in text and "R.matmul" not in text
    assert text.count("R.add(") == 1  # q * k + v's: not a product's
    fn = mod[f"ladder_step22_4096x4096x1024_{dtype}_bias_gelu"]
    assert [p.name for p in _operands(fn)] == ["A", "B", "bias", "D"]


def test_at_one_token_the_matvec_picks_take_no_epilogue_and_the_adds_stay_for_dlight():
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision="bf16")
    mod = dispatch(relax.transform.LiftTransformParams()(block.relax_block(1024, 1, dtype="bf16")[0]))
    if any(step in schedules.EPILOGUE_RUNGS for _, step in dispatch.chosen) or len(dispatch.chosen) != 4:
        pytest.skip(f"the committed rows pick {dispatch.chosen} at one token, not four kernels without an epilogue")
    text = mod["forward"].script()
    assert text.count("R.add(") == 7 and "R.nn.gelu" in text  # 4 biases, q * k + v, 2 residuals
    assert all(len(mod[name].params) == 3 for name in _names(mod))  # A, B, C: the bare products


def _chain_of(ops, dtype="bfloat16", M=128, K=256, N=512):
    """One function: a matmul, then `ops` (each (name, *operands), operands "mm" for what came
    before), its result the output. Returns (func, its chains)."""
    x = relax.Var("x", relax.TensorType((M, K), dtype))
    w = relax.Var("w", relax.TensorType((K, N), dtype))
    b = relax.Var("b", relax.TensorType((N,), dtype))
    r = relax.Var("r", relax.TensorType((M, N), dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w, b, r]):
        with bb.dataflow():
            cur = bb.emit(relax.op.matmul(x, w))
            extra = []
            for op, *args in ops:
                args = [cur if a == "mm" else {"b": b, "r": r}[a] for a in args]
                cur = bb.emit({"add": relax.op.add, "gelu": relax.op.nn.gelu, "relu": relax.op.nn.relu,
                               "silu": relax.op.nn.silu, "mul": relax.op.multiply}[op](*args))
                if op == "mul":
                    extra.append(cur)
            out = bb.emit_output(cur)
        bb.emit_func_output(out)
    func = bb.get()["main"]
    return func, relax_dispatch.epilogue_chains(func, dtype)


@pytest.mark.parametrize("ops, expected", [
    ([("add", "mm", "b")], "acc + bias"),
    ([("add", "b", "mm")], "acc + bias"),                                   # either operand order
    ([("add", "mm", "b"), ("add", "r", "mm")], "acc + bias + 1*C_in"),      # a residual after it
    ([("add", "mm", "r")], "acc + 1*C_in"),                                 # a residual, no bias
    ([("add", "mm", "b"), ("gelu", "mm")], "gelu(acc + bias)"),
    ([("add", "mm", "b"), ("add", "mm", "r"), ("gelu", "mm")], "gelu(acc + bias + 1*C_in)"),
    ([("gelu", "mm")], "gelu(acc)"),
    ([("add", "mm", "b"), ("silu", "mm")], "silu(acc + bias)"),
    ([("mul", "mm", "r")], "acc * C_in"),                                   # a gate
    ([("add", "mm", "b"), ("silu", "mm"), ("mul", "r", "mm")], "silu(acc + bias) * C_in"),
])
def test_the_chains_the_pass_folds_into_a_store(ops, expected):
    func, chains = _chain_of(ops)
    (chain,) = chains.values()
    assert chain.epilogue.describe() == expected and len(chain.absorbed) == len(ops)


@pytest.mark.parametrize("ops, folded", [
    ([("relu", "mm")], 0),                                 # an activation the store has not
    ([("add", "mm", "b"), ("relu", "mm")], 1),             # the bias, not the relu after it
    ([("add", "mm", "b"), ("gelu", "mm"), ("add", "mm", "r")], 2),  # a residual after the GELU is not act(... + C_in)
    ([("add", "mm", "r"), ("mul", "mm", "r")], 1),       # C_in is a residual or a gate, not both
    ([("mul", "mm", "b")], 0),                            # a [N] scale is not a gate
])
def test_what_a_store_cannot_apply_is_left_as_it_was(ops, folded):
    func, chains = _chain_of(ops)
    assert sum(len(c.absorbed) for c in chains.values()) == folded


def _gated_pair(dtype="bfloat16", M=128, K=256, F=512, biases=True):
    """silu(x W_g [+ b_g]) * (x W_u [+ b_u]), a SwiGLU MLP's gated pair, then its down projection."""
    x = relax.Var("x", relax.TensorType((M, K), dtype))
    wg, wu = (relax.Var(n, relax.TensorType((K, F), dtype)) for n in ("wg", "wu"))
    wd = relax.Var("wd", relax.TensorType((F, K), dtype))
    bg, bu = (relax.Var(n, relax.TensorType((F,), dtype)) for n in ("bg", "bu"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, wg, wu, wd, bg, bu]):
        with bb.dataflow():
            g = bb.emit(relax.op.matmul(x, wg))
            if biases:
                g = bb.emit(relax.op.add(g, bg))
            s = bb.emit(relax.op.nn.silu(g))
            u = bb.emit(relax.op.matmul(x, wu))
            if biases:
                u = bb.emit(relax.op.add(u, bu))
            h = bb.emit(relax.op.multiply(s, u))
            out = bb.emit_output(relax.op.matmul(h, wd))
        bb.emit_func_output(out)
    return tvm.IRModule({"main": bb.get()["main"]})


@pytest.mark.parametrize("biases", [True, False])
def test_a_gated_pair_is_two_chains_and_the_gate_takes_the_multiply(biases):
    """silu(x W_g + b_g) * (x W_u + b_u): W_g's chain folds its bias, the SiLU and the multiply
    (C_in: W_u's sum), W_u's chain its bias alone (without biases: W_u's product is a plain one)."""
    chains = relax_dispatch.epilogue_chains(_gated_pair(biases=biases)["main"], "bfloat16")
    described = sorted(c.epilogue.describe() for c in chains.values())
    assert described == (["acc + bias", "silu(acc + bias) * C_in"] if biases else ["silu(acc) * C_in"]), described
    gate = next(c for c in chains.values() if c.epilogue.gate)
    assert not any(gate.c_in.same_as(v) for c in chains.values() for v in c.absorbed)  # bound before it is read


def test_a_gated_pair_in_a_bf16_model_is_two_kernels_and_no_elementwise_one(monkeypatch):
    """Given bf16 rows that pick step 20 at the pair's products (the committed rows pick what they
    measured), the pass puts the multiply, the SiLU and both biases into the two products'
    stores (the gate's kernel: A, B, bias, C_in, D), and the module builds for sm_90a."""
    doc = json.loads(schedules.dispatch.TABLE_PATH.read_text())
    shapes = [(256, 1024, 512), (256, 512, 1024)]
    doc["gpus"][0]["precisions"]["bf16"] = {"steps": [13, 20], "shapes": [[*s, [2e-3, 1e-3]] for s in shapes]}
    monkeypatch.setattr(schedules.dispatch, "table", lambda path=None: doc)
    mod = relax_dispatch.DispatchMatmuls("sm_90a", "bf16")(_gated_pair(M=256, K=512, F=1024))
    text = mod.script()
    assert "R.multiply" not in text and "R.nn.silu" not in text and "R.add" not in text, text
    names = _names(mod)
    assert sorted(n.split("_bf16")[1] for n in names) == ["", "_bias", "_bias_silu_gate"], names
    gate = mod[next(n for n in names if n.endswith("_bias_silu_gate"))]
    assert [p.name for p in _operands(gate)] == ["A", "B", "bias", "C_in", "D"]
    ex, chosen = block.compile_block(_gated_pair(M=256, K=512, F=1024), "ladder", "sm_90a", precision="bf16")
    assert {step for _, step in chosen} <= {20, 22}  # step 20's 256 x 128 tile with an epilogue: step 22's store
    src = _source(ex)
    assert "_256x1024x512_bf16_bias_silu_gate" in src and "expf" in src


def test_a_swiglu_block_in_bf16_folds_its_gated_pair(monkeypatch):
    """python -m steps.model --dtype bf16 --mlp swiglu's block: given bf16 rows that pick step 20
    at its five products (the committed rows: what they measured), the pass leaves no SiLU and no
    multiply for dlight (the gate's kernel stores silu(acc) * C_in), and the block builds for sm_90a."""
    d, tokens = 256, 256
    f = block.swiglu_width(d)
    doc = json.loads(schedules.dispatch.TABLE_PATH.read_text())
    shapes = [(tokens, 3 * d, d), (tokens, d, d), (tokens, f, d), (tokens, d, f)]
    doc["gpus"][0]["precisions"]["bf16"] = {"steps": [13, 20], "shapes": [[*s, [2e-3, 1e-3]] for s in shapes]}
    monkeypatch.setattr(schedules.dispatch, "table", lambda path=None: doc)
    mod = relax.transform.LiftTransformParams()(block.relax_block(d, tokens, dtype="bf16", mlp="swiglu")[0])
    placed = relax_dispatch.DispatchMatmuls("sm_90a", "bf16")(mod)
    text = placed["forward"].script()
    assert "R.nn.silu" not in text and text.count("R.multiply") == 1, text  # q * k alone stays
    assert any(n.endswith("_silu_gate") for n in _names(placed)), _names(placed)
    ex, chosen = block.compile_block(block.relax_block(d, tokens, dtype="bf16", mlp="swiglu")[0], "ladder", "sm_90a",
                                     precision="bf16")
    assert "silu_gate" in _source(ex)


def test_a_sum_read_twice_is_not_folded():
    x = relax.Var("x", relax.TensorType((128, 256), "bfloat16"))
    w = relax.Var("w", relax.TensorType((256, 512), "bfloat16"))
    b = relax.Var("b", relax.TensorType((512,), "bfloat16"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            mm = bb.emit(relax.op.matmul(x, w))
            biased = bb.emit(relax.op.add(mm, b))
            out = bb.emit_output(relax.op.add(bb.emit(relax.op.nn.gelu(biased)), biased))  # biased read twice
        bb.emit_func_output(out)
    (chain,) = relax_dispatch.epilogue_chains(bb.get()["main"], "bfloat16").values()
    assert chain.epilogue.describe() == "acc + bias"  # the bias only: its sum has two users


def test_the_bf16_table_places_its_hopper_picks_in_the_model():
    if "bf16" not in (schedules.dispatch.gpu_entry("sm_90") or {}).get("precisions", {}):
        pytest.skip("no bf16 rows committed")
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision="bf16")
    dispatch(_lifted("bf16"))
    assert sorted(mnk for mnk, _ in dispatch.chosen) == sorted(SHAPES)  # all four: the Hopper rungs build anywhere
    assert any(schedules.get_step(step).arch == "sm_90a" for _, step in dispatch.chosen)


def test_a_step_26_pick_builds_in_a_model_with_its_epilogue(monkeypatch):
    """Step 26 has no measured rows yet; given a table whose bf16 rows pick it at a block's four
    products (16 tokens), the pass places it, each kernel with its chain's epilogue, and the
    block builds for sm_90a: what a benchmark that measures it will give a model."""
    doc = json.loads(schedules.dispatch.TABLE_PATH.read_text())
    shapes = [(16, 768, 256), (16, 256, 256), (16, 1024, 256), (16, 256, 1024)]
    doc["gpus"][0]["precisions"]["bf16"] = {"steps": [23, 26], "shapes": [[*s, [2e-3, 1e-3]] for s in shapes]}
    monkeypatch.setattr(schedules.dispatch, "table", lambda path=None: doc)
    ex, chosen = block.compile_block(block.relax_block(256, 16, dtype="bf16")[0], "ladder", "sm_90a", precision="bf16")
    assert sorted(chosen) == sorted((s, 26) for s in shapes)
    names = {name.split("_kernel")[0] for name in checks.cuda_kernels(_source(ex)) if name.startswith("ladder_step")}
    assert names == {"ladder_step26_16x768x256_bf16_bias", "ladder_step26_16x256x256_bf16_bias_res",
                     "ladder_step26_16x1024x256_bf16_bias_gelu", "ladder_step26_16x256x1024_bf16_bias_res"}
    src = _source(ex)
    assert src.count("cluster_sum_v4(") >= 4 and "W_ptr" not in src


def _one_matmul(x_dtype, w_dtype, out_dtype=None):
    x = relax.Var("x", relax.TensorType((128, 256), x_dtype))
    w = relax.Var("w", relax.TensorType((256, 512), w_dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        y = bb.emit(relax.op.matmul(x, w, out_dtype=out_dtype) if out_dtype else relax.op.matmul(x, w))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("precision, mod", [
    ("bf16", _one_matmul("bfloat16", "bfloat16", "float32")),  # a 16-bit product asked for in fp32
    ("bf16", _one_matmul("float32", "float32")),               # fp32 operands in a bf16 pass
    ("bf16", _one_matmul("float16", "float16")),               # the other 16-bit dtype
    ("fp32", _one_matmul("bfloat16", "bfloat16")),             # bf16 operands in an fp32 pass
])
def test_what_the_16_bit_pass_cannot_take_is_left_for_dlight(precision, mod):
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision=precision)
    out = dispatch(mod)
    assert dispatch.chosen == [] and "R.matmul" in out["main"].script()


def test_a_bf16_matmul_of_the_same_dtype_is_taken():
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision="bf16")
    out = dispatch(_one_matmul("bfloat16", "bfloat16"))
    assert [mnk for mnk, _ in dispatch.chosen] == [(128, 512, 256)] and "R.matmul" not in out["main"].script()


def test_the_pipeline_builds_a_bf16_block_for_sm_90a():
    ex, chosen = block.compile_block(block.relax_block(256, 128, dtype="bf16")[0], "ladder", "sm_90a",
                                     precision="bf16")
    assert sorted(mnk for mnk, _ in chosen) == sorted([(128, 768, 256), (128, 256, 256), (128, 1024, 256),
                                                       (128, 256, 1024)])
    kernels = {name: src for name, src in checks.cuda_kernels(_source(ex)).items() if name.startswith("ladder_step")}
    assert len({name.split("_kernel")[0] for name in kernels}) == 4
    assert all("nv_bfloat16" in src for src in kernels.values())
    # The bias, GELU and residual adds are dlight's elementwise kernels after each product (in bf16).
    gelu = [name for name, src in checks.cuda_kernels(_source(ex)).items() if "erf" in src]
    assert len(gelu) == 1 and gelu[0].startswith("fused_") and "gelu" in gelu[0]


def _source(ex) -> str:
    def modules(m):
        yield m
        for i in m.imports:
            yield from modules(i)
    return next(m.inspect_source() for m in modules(ex.mod) if "__global__" in m.inspect_source())


def test_16_bit_runs_save_in_the_dtypes_folder():
    assert command.saved_names(False, "bf16") == ("bf16/model.json", "bf16/model.txt", "bf16/model.png")
    assert command.saved_names(True, "fp16") == ("fp16/model_cuda_graph.json", "fp16/model_cuda_graph.txt",
                                                 "fp16/model_cuda_graph.png")


def _row(tokens, ladder, dlight, torch=None, errs=(1e-3, 1e-3, 1e-3)):
    row = {"tokens": tokens, "ladder": {"median_ms": ladder, "rel_err": errs[0]},
           "dlight": {"median_ms": dlight, "rel_err": errs[1]}, "vs_dlight": dlight / ladder}
    if torch is not None:
        row["torch"] = {"median_ms": torch, "rel_err": errs[2]}
        row["vs_torch"] = torch / ladder
    return row


def test_16_bit_errors_are_held_to_twice_torchs_and_the_dtypes_bound():
    assert command.error_bound("fp32", _row(1, 1, 1, 1)) == command.TOLERANCE
    assert command.error_bound("bf16", _row(1, 1, 1, 1, errs=(0, 0, 4e-3))) == pytest.approx(8e-3)
    assert command.error_bound("bf16", _row(1, 1, 1, 1, errs=(0, 0, 0.5))) == command.TOLERANCE_16["bf16"]
    assert command.error_bound("fp16", _row(1, 1, 1)) == command.TOLERANCE_16["fp16"]


def test_the_16_bit_verdict_states_issue_50s_bars():
    doc = {"dtype": "bf16", "rows": [_row(1, 1.0, 2.0, 0.9), _row(16, 1.0, 6.0, 3.0), _row(1024, 1.0, 40.0, 1.1)]}
    text = command.verdict(doc)
    assert "x dlight at >= 16 tokens at least 6.00 (bar 5)" in text
    assert "x torch at 1 and >= 1024 tokens at least 0.90 (bar 1)" in text  # the 1-token row counts
    assert "the ladder's largest error 1.0e-03 (bound 2.0e-03, twice torch's or 0.03)" in text
    assert "the peers' largest: torch 1.0e-03, dlight 1.0e-03 (bound 0.03)" in text


def test_16_bit_with_the_torch_frontend_is_one_line(capsys):
    assert command.main(["--dtype", "bf16", "--frontend", "torch", "--tokens", "16"]) == 2
    one_line_error(capsys.readouterr().err, "steps.model", "--frontend torch")


def test_a_bf16_block_builds_replayed_from_a_cuda_graph_both_ways():
    mod = block.relax_block(256, 1, dtype="bf16")[0]
    for way in ("dlight", "ladder"):
        graph, chosen = block.compile_block(mod, way, "sm_90a", cuda_graph=True, precision="bf16")
        assert "vm.builtin.cuda_graph.run_or_capture" in graph.as_text()
        assert (way == "dlight") == (chosen == [])


def test_a_2d_chain_that_is_the_functions_output_becomes_one_call():
    x = relax.Var("x", relax.TensorType((4096, 1024), "bfloat16"))
    w = relax.Var("w", relax.TensorType((1024, 1024), "bfloat16"))
    b = relax.Var("b", relax.TensorType((1024,), "bfloat16"))
    r = relax.Var("r", relax.TensorType((4096, 1024), "bfloat16"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w, b, r]):
        with bb.dataflow():
            biased = bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, w)), b))
            out = bb.emit_output(relax.op.nn.gelu(bb.emit(relax.op.add(r, biased))))
        bb.emit_func_output(out)
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a", precision="bf16")
    text = dispatch(bb.get())["main"].script()
    (step,) = [s for _, s in dispatch.chosen]
    assert f"R.call_tir(ladder_step{step}_4096x1024x1024_bf16_bias_res_gelu, (x, w, b, r)" in text
    assert "R.add" not in text and "R.nn.gelu" not in text and "R.matmul" not in text


def test_the_block_takes_the_dispatch_rows_of_the_gpu_it_runs_on():
    """steps.model passes the GPU's name (where the table has rows of that GPU) to the Relax pass,
    and its report says whose rows the picks came from."""
    mod = block.relax_block(256, 16, dtype="bf16")[0]
    first = schedules.dispatch.table()["gpus"][0]["gpu"]
    _, default = block.compile_block(mod, "ladder", "sm_90a", precision="bf16")
    _, named = block.compile_block(mod, "ladder", "sm_90a", precision="bf16", gpu=first)
    assert named == default and default
    # A GPU without rows of its own: None, the family's first entry, as the default.
    assert schedules.dispatch.table_gpu("No Such GPU") is None
    doc = {"dtype": "bf16", "d": 256, "frontend": "nn", "rounds": 3, "repeat": 5, "dispatch_rows": first,
           "environment": {"gpu": "NVIDIA H200", "date": "2026-11-29T00:00:00+00:00"},
           "rows": [_row(16, 1.0, 6.0, 3.0)]}
    assert f"the ladder's picks from the dispatch rows of {first}" in command.format_report(doc).splitlines()[0]


@pytest.mark.parametrize("step, M, N, K, dtype, kernels", [
    (23, 16, 3072, 1024, "bf16", 2),   # K in parts, then the sum of the parts
    (23, 1024, 3072, 1024, "bf16", 1),  # one part: step 20's kernel
    (26, 16, 3072, 1024, "bf16", 1),   # the parts summed in the cluster
    (28, 1024, 1024, 1024, "fp32", 8),  # seven copy kernels and the product
    (13, 16, 3072, 1024, "bf16", 1),
])
def test_launches_counts_a_scheduled_functions_kernels(step, M, N, K, dtype, kernels):
    func = schedules.get_step(step).schedule(M, N, K, dtype=dtype).mod["main"]
    assert relax_dispatch.launches(func) == kernels


def test_a_16_token_block_takes_the_kernels_its_host_issues_sooner(monkeypatch):
    # H200 rows, bf16, 16 tokens: step 23 is the fastest kernel at the nearest rows for all four
    # products (the kernel-time rows of 2026-11-30; two of them in the time_evaluator rows of
    # 2026-11-29 19:05), in two kernels each; step 26, 1.0-1.3x slower there, in one. A plain call
    # is the host's pace at these sizes (results/nvidia-h200/evidence/model_launches.txt).
    mod = block.relax_block(1024, 16, dtype="bf16")[0]
    _, chosen = block.compile_block(mod, "ladder", "sm_90a", precision="bf16", gpu="NVIDIA H200")
    assert sorted(chosen) == [((16, 1024, 1024), 26), ((16, 1024, 4096), 26), ((16, 3072, 1024), 26),
                              ((16, 4096, 1024), 26)]
    monkeypatch.setattr(relax_dispatch, "host_time", lambda *a, **k: None)
    _, chosen = block.compile_block(mod, "ladder", "sm_90a", precision="bf16", gpu="NVIDIA H200")
    assert sorted(step for _, step in chosen) == [23, 23, 23, 23]
    # where the kernels are longer than their issue (512 tokens) the fastest kernels stay
    monkeypatch.undo()
    _, chosen = block.compile_block(block.relax_block(1024, 512, dtype="bf16")[0], "ladder", "sm_90a",
                                    precision="bf16", gpu="NVIDIA H200")
    assert [step for _, step in chosen] == [23, 23, 23, 23]
