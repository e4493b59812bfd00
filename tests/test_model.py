"""The model path without a GPU: the block's math on the CPU against float64, the Relax pass that
gives each matmul the ladder's kernel (schedules/integration/relax_dispatch.py): what it rewrites, what it
leaves to dlight, that the module builds for sm_90a; python -m steps.model's bad input.
On a GPU: tests/test_gpu_model.py."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import schedules
from schedules import ConfigError
from schedules.integration import relax_dispatch
from steps.commands import model as command
from steps.measure import model as block

from . import checks
from .checks import one_line_error


def _run_on_the_cpu(mod, params, x):
    """The block's forward on x, built for llvm, its weights lifted as a deployment does."""
    ex = tvm.compile(relax.transform.LiftTransformParams()(mod), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    lifted = vm["forward_transform_params"]([tvm.runtime.tensor(p) for p in params])
    return vm["forward"](tvm.runtime.tensor(x), *lifted).numpy()


def test_the_block_in_relax_computes_the_float64_reference_on_the_cpu():
    d, tokens = 64, 16
    w = block.weights(d, 1)
    mod, entry, params = block.relax_block(d, tokens, w)
    assert entry == "forward" and [p.shape for p in params] == [
        (3 * d, d), (3 * d,), (d, d), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    x = np.random.default_rng(2).uniform(-1, 1, (1, tokens, d)).astype(np.float32)
    out = _run_on_the_cpu(mod, params, x)
    ref = block.reference(x, w)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6
    # and the reference is not trivially small: the residuals and GELU leave it O(1)
    assert 0.1 < np.abs(ref).mean() < 10


def test_the_swiglu_block_in_relax_computes_the_float64_reference_on_the_cpu():
    """LLaMA's gated MLP (--mlp swiglu): gate and up without bias, F = 8d/3 rounded up to 256."""
    d, tokens = 96, 8
    f = block.swiglu_width(d)
    assert (f, block.swiglu_width(1024), block.swiglu_width(4096)) == (256, 2816, 11008)
    w = block.weights(d, 1, mlp="swiglu")
    mod, entry, params = block.relax_block(d, tokens, w, mlp="swiglu")
    assert [p.shape for p in params] == [(3 * d, d), (3 * d,), (d, d), (d,), (f, d), (f, d), (d, f)]
    x = np.random.default_rng(2).uniform(-1, 1, (1, tokens, d)).astype(np.float32)
    out = _run_on_the_cpu(mod, params, x)
    ref = block.reference(x, w)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6
    mlp = ref - block.reference(x, {**w, "down.weight": np.zeros_like(w["down.weight"])})  # the MLP's share
    assert 0.01 < np.abs(mlp).mean() and 0.1 < np.abs(ref).mean() < 10


def _lifted(d=1024, tokens=1024):
    return relax.transform.LiftTransformParams()(block.relax_block(d, tokens)[0])


def test_every_matmul_of_the_block_gets_a_ladder_kernel():
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a")
    mod = dispatch(_lifted())
    used = relax_dispatch.steps_used(mod)
    assert sorted(mnk for mnk, _ in dispatch.chosen) == sorted(
        [(1024, 3072, 1024), (1024, 1024, 1024), (1024, 4096, 1024), (1024, 1024, 4096)])
    assert len(used) == 4
    for (M, N, K), step in dispatch.chosen:
        # the pick is fastest's among the steps a model can build
        expected = schedules.dispatch.choose(M, N, K, "fp32", "sm_90", schedules.STEPS,
                                             allow=lambda s: relax_dispatch.in_model(s, M, N, K))
        # each with its chain's epilogue fused (the name's tag): steps 19 and 25 take one too
        [name] = [n for n in used if n.startswith(f"ladder_step{step}_{M}x{N}x{K}_")]
        assert step == expected.step.number and used[name] == step
        assert schedules.get_step(step).precision == "fp32" and step != 14  # 14 needs a lowering pass
    assert sorted(n.split("x", 2)[2].split("_", 1)[1] for n in used) == ["bias", "bias_gelu", "bias_res", "bias_res"]
    text = mod["forward"].script()
    assert "R.matmul" not in text and text.count("R.call_tir(ladder_step") == 4
    for gv, func in mod.functions_items():
        if gv.name_hint.startswith("ladder_step"):
            assert func.attrs["tirx.is_scheduled"] and int(func.attrs["op_pattern"]) == relax_dispatch.OPAQUE


def _kernels(ex) -> dict[str, str]:
    """The CUDA kernels of a built module: {name: source}."""
    def modules(m):
        yield m
        for i in m.imports:
            yield from modules(i)
    return checks.cuda_kernels(next(m.inspect_source() for m in modules(ex.mod) if "__global__" in m.inspect_source()))


def test_the_pipeline_builds_the_block_with_its_epilogues_fused():
    # At 128 tokens every matmul's pick is a TensorIR step: the dlight rule schedules each fused
    # function, bias, GELU and residual inside the matmul's kernel.
    ex, chosen = block.compile_block(block.relax_block(256, 128)[0], "ladder", "sm_90a")
    assert sorted(mnk for mnk, _ in chosen) == sorted([(128, 768, 256), (128, 256, 256), (128, 1024, 256),
                                                       (128, 256, 1024)])
    kernels = _kernels(ex)
    gelu = [name for name, src in kernels.items() if "erff(" in src]
    assert len(gelu) == 1 and gelu[0].startswith("fused_matmul") and "A_pad_shared" in kernels[gelu[0]]
    matmuls = {name.split("_kernel")[0] for name in kernels if name.startswith("fused_matmul")}
    assert len(matmuls) == 4  # every matmul with its epilogue, none left to dlight


def test_the_pipeline_folds_an_fp32_swiglu_pair_into_a_tensorir_steps_store():
    # At 16 tokens every pick is a TensorIR step: the dlight rule takes the fused function of
    # W_gate's product, the SiLU and the multiply by W_up's product (step 11's split K: the
    # SiLU and the multiply in its sum of the parts), and no kernel of its own reads them back.
    ex, chosen = block.compile_block(block.relax_block(256, 16, mlp="swiglu")[0], "ladder", "sm_90a")
    assert len(chosen) == 5 and all(schedules.get_step(step).schedules_a_block for _, step in chosen)
    kernels = _kernels(ex)
    silu = [name for name, src in kernels.items() if "expf(" in src]
    assert silu and all(n.startswith("fused_matmul_silu_multiply") for n in silu), silu
    assert not [n for n in kernels if "silu" in n and "matmul" not in n]


def test_at_1024_tokens_the_hopper_kernels_come_in_at_the_relax_level():
    if not schedules.dispatch.table()["gpus"]:
        pytest.skip("no dispatch table committed")
    ex, chosen = block.compile_block(block.relax_block(1024, 1024)[0], "ladder", "sm_90a")
    steps = dict(chosen)
    hopper = [mnk for mnk, step in steps.items() if schedules.get_step(step).arch is not None]
    assert hopper, steps
    names = set(_kernels(ex))
    for M, N, K in hopper:
        assert any(n.startswith(f"ladder_step{steps[(M, N, K)]}_{M}x{N}x{K}") for n in names)


def test_without_hopper_the_rungs_are_not_candidates():
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90")
    dispatch(_lifted(256, 4096))
    assert dispatch.chosen and all(schedules.get_step(s).arch is None for _, s in dispatch.chosen)


def test_step_11_at_a_long_serial_k_is_not_taken_in_a_model():
    s11 = schedules.get_step(11)
    cfg = s11.default_config(2048, 2048, 16384)
    assert schedules.device_passes(s11, cfg, 16384)  # long_k's promotion pass
    assert not relax_dispatch.in_model(s11, 2048, 2048, 16384)
    assert relax_dispatch.in_model(s11, 1024, 1024, 1024)
    assert not relax_dispatch.in_model(schedules.get_step(14), 1024, 1024, 1024)


@R.function
def _dynamic(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 32), "float32")):
    return R.matmul(x, w)


@R.function
def _batched(x: R.Tensor((4, 16, 64), "float32"), w: R.Tensor((4, 64, 32), "float32")):
    return R.matmul(x, w)


@R.function
def _half(x: R.Tensor((16, 64), "float16"), w: R.Tensor((64, 32), "float16")):
    return R.matmul(x, w)


@pytest.mark.parametrize("func", [_dynamic, _batched, _half], ids=["dynamic", "batched-weight", "fp16"])
def test_what_the_ladder_cannot_take_is_left_for_dlight(func):
    mod = tvm.IRModule({"main": func})
    dispatch = relax_dispatch.DispatchMatmuls(arch="sm_90a")
    out = dispatch(mod)
    assert dispatch.chosen == [] and "R.matmul" in out["main"].script()


def test_a_batched_matmul_goes_to_the_rule_in_the_pipeline():
    # the Relax pass leaves it (above); the dlight rule takes it, a batch over blockIdx.z
    relax_pipeline, dispatch, rule = relax_dispatch.pipeline("sm_90")
    with tvm.transform.PassContext(opt_level=3, config=relax_dispatch.PASS_CONFIG):
        ex = tvm.compile(tvm.IRModule({"main": _batched}), target=schedules.target("sm_90"),
                         relax_pipeline=relax_pipeline)
    assert dispatch.chosen == [] and [(mnk, step) for mnk, step, _ in rule.chosen] == [((16, 32, 64), 11)]
    (src,) = _kernels(ex).values()
    assert "blockIdx.z" in src


def test_cuda_graph_builds_replay_both_ways_and_save_apart():
    mod = block.relax_block(256, 1)[0]
    for way in ("dlight", "ladder"):
        plain, _ = block.compile_block(mod, way, "sm_90a")
        graph, _ = block.compile_block(mod, way, "sm_90a", cuda_graph=True)
        assert "cuda_graph" not in plain.as_text() and "vm.builtin.cuda_graph.run_or_capture" in graph.as_text()
    assert command.saved_names(False) == ("model.json", "model.txt", "model.png")
    assert command.saved_names(True) == ("model_cuda_graph.json", "model_cuda_graph.txt", "model_cuda_graph.png")
    assert command.saved_names(False, "bf16", "swiglu") == ("bf16/model_swiglu.json", "bf16/model_swiglu.txt",
                                                            "bf16/model_swiglu.png")
    assert command.saved_names(True, "fp32", "swiglu")[0] == "model_swiglu_cuda_graph.json"


def test_bad_arguments_are_one_line():
    with pytest.raises(ConfigError, match="unknown arch"):
        relax_dispatch.DispatchMatmuls(arch="sm_75")
    with pytest.raises(ConfigError, match="precision"):
        relax_dispatch.DispatchMatmuls(precision="fp8")
    with pytest.raises(ConfigError, match="fp16, bf16: its float16, bfloat16 ones"):
        relax_dispatch.DispatchMatmuls(precision="int8")


@pytest.mark.parametrize("args, words", [
    (["--arch", "sm_75"], ["unknown arch"]),
    (["--tokens", "0"], ["--tokens"]),
    (["--d", "-1"], ["--d"]),
    (["--frontend", "onnx"], ["--frontend"]),
    (["--tokens", "70000", "--d", "8192"], ["2^31"]),
])
def test_the_command_rejects_bad_input_in_one_line(args, words, capsys):
    assert command.main(args) == 2
    one_line_error(capsys.readouterr().err, "steps.model", *words)


def test_without_a_gpu_the_command_says_so(capsys):
    if command.harness.gpu_present():
        pytest.skip("a GPU is present")
    assert command.main(["--frontend", "nn", "--tokens", "16"]) == 2
    one_line_error(capsys.readouterr().err, "steps.model", "no CUDA GPU")
