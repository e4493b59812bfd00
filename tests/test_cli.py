"""The step CLIs without a GPU: help, clean one-line errors (exit 2), build-only, explain."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import schedules
from steps.commands import bench, cli, crosscheck, cublas, ladder, options, rpc_pool, sweep
from steps.measure import harness, nvcc

from .checks import one_line_error, without_progress

ROOT = Path(__file__).resolve().parent.parent

NO_GPU = not harness.gpu_present()


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)


def test_help():
    proc = run("steps.step4", "--help")
    assert proc.returncode == 0
    for flag in ("--sizes", "--repeat", "--arch", "--save", "--build-only", "--explain"):
        assert flag in proc.stdout


# Each CLI lists the options it honours, and no others.
HONOURED = {
    "steps.step4": ({"--sizes", "--shape", "--repeat", "--arch", "--seed", "--save", "--build-only", "--explain",
                     "--tuned-prior", "--full", "--compare", "--config", "--dtype"}, set()),
    # --config changes one step's config: the ladder runs many steps, each at its tuned one.
    "steps": ({"--sizes", "--shape", "--repeat", "--arch", "--seed", "--save", "--build-only", "--compare",
               "--steps", "--references", "--dtype"}, {"--explain", "--tuned-prior", "--full", "--config"}),
    "steps.sweep": ({"--sizes", "--shape", "--repeat", "--arch", "--step", "--top", "--workers", "--write",
                     "--dry-run", "--log", "--shapes", "--shape-file", "--candidates", "--from-log", "--resume",
                     "--tracker", "--key", "--timeout", "--wait", "--confirm", "--dtype"},
                    {"--save", "--build-only", "--explain", "--compare", "--seed", "--rpc-target"}),
    "steps.cublas": ({"--sizes", "--shape", "--repeat", "--arch", "--seed", "--only", "--tune", "--trials",
                      "--tracker", "--key"},
                     {"--save", "--build-only", "--explain", "--compare", "--tf32"}),
    "steps.crosscheck": ({"--sizes", "--shape", "--repeat", "--arch", "--save", "--steps", "--calls"},
                         {"--seed", "--build-only", "--explain", "--compare"}),
    "steps.bench": ({"--steps", "--references", "--class", "--shapes", "--repeat", "--arch", "--seed", "--workers",
                     "--save", "--save-dispatch", "--check-only", "--build-only", "--list", "--fastest", "--dtype",
                     "--in-turns", "--graph"},
                    {"--sizes", "--shape", "--explain", "--compare", "--results-dir", "--shape-set", "--dispatch-table"}),
    "steps.rpc_pool": ({"--gpus", "--key", "--tracker", "--host", "--port", "--server-port", "--custom-addr", "--fork"},
                       {"--sizes", "--repeat", "--arch"}),
}


def _help_of(prog, capsys) -> str:
    mains = {"steps.step4": lambda argv: cli.main(4, argv), "steps": ladder.main, "steps.sweep": sweep.main,
             "steps.cublas": cublas.main, "steps.crosscheck": crosscheck.main, "steps.bench": bench.main,
             "steps.rpc_pool": rpc_pool.main}
    with pytest.raises(SystemExit) as done:
        mains[prog](["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("prog", HONOURED)
def test_each_cli_lists_only_the_options_it_honours(prog, capsys):
    listed = set(re.findall(r"^\s+(--[\w-]+)", _help_of(prog, capsys), re.M)) - {"--help"}
    wanted, unwanted = HONOURED[prog]
    assert listed == wanted, f"missing {wanted - listed}, unexpected {listed - wanted}"
    assert not listed & unwanted


@pytest.mark.parametrize("prog, make", [
    ("steps.step4", lambda: cli.step_parser("p", "d")),
    ("steps", ladder.parser),
    ("steps.sweep", lambda: sweep.parser("p")),
])
def test_help_states_the_real_defaults(prog, make):
    """Every "(default: N)" in the help is the value the option really defaults to (sweep's
    --repeat said 30 and was 10)."""
    stated = 0
    for action in make()._actions:
        match = re.search(r"\(default: (\d+)", action.help or "")
        if match:
            stated += 1
            assert int(match[1]) == action.default, f"{action.option_strings}: {action.help!r}"
    assert stated >= 1
    if prog == "steps.sweep":
        assert make().parse_args(["--step", "7"]).repeat == sweep.REPEAT == 10


@pytest.mark.parametrize("cpus, local, remote", [(2, 2, 2), (1, 1, 1), (None, 1, 1), (16, 12, 16), (128, 12, 128)])
def test_sweep_workers_default_to_the_cpu_count(monkeypatch, cpus, local, remote):
    """One build process per CPU; the local path's, which also time on the one GPU, at most 12."""
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: cpus)
    assert sweep.default_workers() == local and sweep.default_workers(remote=True) == remote
    p = sweep.parser("p")
    assert p.parse_args(["--step", "7"]).workers is None  # main resolves it, knowing --tracker
    assert p.parse_args(["--step", "7", "--workers", "3"]).workers == 3
    action = next(a for a in p._actions if "--workers" in a.option_strings)
    assert "the CPU count" in action.help and f"{local} here" in action.help and "--tracker" in action.help


def test_repeated_sizes_accumulate(monkeypatch, capsys):
    args = cli.step_parser("p", "d").parse_args(["--sizes", "512", "--sizes", "1024", "2048", "--sizes", "512"])
    assert options.requested_shapes(args) == [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]
    monkeypatch.setattr(nvcc, "available", lambda: False)
    assert cli.main(1, ["--build-only", "--sizes", "64", "--sizes", "128"]) == 0
    out = capsys.readouterr().out
    assert "64x64x64" in out and "128x128x128" in out


def test_a_seed_of_zero_is_a_seed():
    assert cli.step_parser("p", "d").parse_args(["--seed", "0"]).seed == 0


# --- unsupported GPUs ------------------------------------------------------------------------

SUPPORTED = ", ".join(schedules.VALID_ARCHS)


@pytest.mark.parametrize("requested, gpu, timing, arch", [
    (None, None, True, "sm_90"),        # no GPU: build for sm_90
    (None, "sm_86", True, "sm_86"),     # a supported GPU: its own
    (None, "sm_80", False, "sm_80"),
    ("sm_80", "sm_90", False, "sm_80"),  # --arch wins
    ("sm_80", "sm_75", False, "sm_80"),  # --arch on an unsupported GPU, building only: as asked, no note
])
def test_resolve_arch_without_a_note(requested, gpu, timing, arch):
    assert options.resolve_arch(requested, gpu, timing) == (arch, None)


@pytest.mark.parametrize("gpu", ["sm_75", "sm_100", "sm_120", "sm_70"])
def test_an_unsupported_gpu_builds_for_sm_90_with_a_note(gpu):
    arch, note = options.resolve_arch(None, gpu, timing=False)
    assert arch == "sm_90"
    assert "\n" not in note and gpu in note and SUPPORTED in note and "--arch" in note


@pytest.mark.parametrize("requested", [None, "sm_90"])
@pytest.mark.parametrize("gpu", ["sm_75", "sm_100", "sm_120"])
def test_an_unsupported_gpu_cannot_time(gpu, requested):
    with pytest.raises(options.UsageError) as info:
        options.resolve_arch(requested, gpu, timing=True)
    msg = str(info.value)
    assert "\n" not in msg and f"this GPU is {gpu}" in msg and SUPPORTED in msg
    assert "--build-only --arch sm_90" in msg


def test_an_unknown_requested_arch_is_still_an_error():
    with pytest.raises(schedules.ConfigError, match="unknown arch 'sm_75'"):
        options.resolve_arch("sm_75", "sm_90", timing=False)


@pytest.fixture
def unsupported_gpu(monkeypatch):
    """A GPU the ladder does not support (an sm_120 board), as harness reports it."""
    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    monkeypatch.setattr(harness, "gpu_arch", lambda: "sm_120")
    monkeypatch.setattr(nvcc, "available", lambda: False)


NOTE = f"note: this GPU is sm_120, which the ladder does not support ({SUPPORTED}); building for sm_90"


@pytest.mark.parametrize("prog, call", [
    ("steps.step4", lambda: cli.main(4, ["--build-only", "--sizes", "64"])),
    ("steps.step4", lambda: cli.main(4, ["--explain", "--sizes", "64"])),
    ("steps", lambda: ladder.main(["--build-only", "--steps", "4", "--sizes", "64"])),
    ("steps.sweep", lambda: sweep.main(["--step", "7", "--sizes", "1024", "--dry-run"])),
])
def test_building_on_an_unsupported_gpu_falls_back_to_sm_90(unsupported_gpu, capsys, prog, call):
    assert call() == 0
    out, err = capsys.readouterr()
    assert without_progress(err).strip().splitlines() == [f"python -m {prog}: {NOTE} (--arch picks another)"]
    assert out


@pytest.mark.parametrize("prog, call", [
    ("steps.step4", lambda: cli.main(4, ["--sizes", "64"])),
    ("steps.step4", lambda: cli.main(4, ["--sizes", "64", "--arch", "sm_90"])),
    ("steps.step4", lambda: cli.main(4, ["--compare", "results/nvidia-h200"])),
    ("steps", lambda: ladder.main(["--steps", "4", "--sizes", "64"])),
    ("steps.sweep", lambda: sweep.main(["--step", "7", "--sizes", "1024"])),
])
def test_timing_on_an_unsupported_gpu_is_one_line_exit_2(unsupported_gpu, capsys, prog, call):
    assert call() == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line_error(err, prog, "this GPU is sm_120", SUPPORTED, "--build-only --arch sm_90")


# --- python -m steps.stepN for a number with no module ----------------------------------------

FIRST, LAST = schedules.STEPS[0].number, schedules.STEPS[-1].number


@pytest.mark.parametrize("number", [LAST + 1, 0])
def test_python_m_an_unknown_step_is_one_line_exit_2(number):
    proc = run(f"steps.step{number}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"python -m steps.step{number}: error: unknown step {number}; "
                           f"steps are {FIRST}-{LAST}\n")


@pytest.mark.parametrize("number", [12, 14])
def test_a_tensor_core_step_runs_from_its_own_file(number):
    """Steps 12-14 have a stepN.py like steps 1-11 (they were served by an import hook)."""
    proc = run(f"steps.step{number}", "--build-only", "--sizes", "128")
    assert proc.returncode == 0, proc.stderr
    assert f"step {number}: {schedules.get_step(number).name}" in proc.stdout and "128x128x128" in proc.stdout


def test_importing_an_unknown_step_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError, match="steps.step99"):
        importlib.import_module("steps.step99")


@pytest.mark.parametrize("args, words", [
    (["--sizes", "0"], ["--sizes", ">= 1"]),
    (["--sizes", "-3"], ["--sizes"]),
    (["--sizes", "abc"], ["not an integer"]),
    (["--shape", "0", "64", "64"], ["--shape", ">= 1"]),
    (["--shape", "64", "64"], ["--shape", "3 arguments"]),
    (["--arch", "sm_75"], ["unknown arch", "sm_75"]),
    (["--repeat", "0"], ["--repeat"]),
    (["--bogus"], ["unrecognized"]),
    (["--seed", "-1"], ["--seed", ">= 0"]),  # numpy's default_rng rejected it, in the GPU path
    # 46341^2 > 2^31: TVM stopped on an int32 literal, reported per size, exit 1
    (["--sizes", "46341"], ["46341x46341x46341", "A would have", "2^31", "M*K, K*N and M*N"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    proc = run("steps.step4", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    one_line_error(proc.stderr, "steps.step4", *words)
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, words", [
    (["--shape", "1", "46341", "46341"], ["1x46341x46341", "B would have", "2^31"]),
    # options that other options would silently ignore
    (["--save", "--build-only"], ["--save", "--build-only"]),
    (["--save", "--explain"], ["--save", "--explain"]),
    (["--compare", "results/nvidia-h200", "--build-only"], ["--compare", "--build-only"]),
    (["--compare", "results/nvidia-h200", "--explain"], ["--compare", "--explain"]),
    (["--explain", "--build-only"], ["--explain", "--build-only"]),
    (["--full"], ["--full goes with --explain"]),
    (["--tuned-prior", "--build-only"], ["--tuned-prior goes with --explain"]),
    # --config: its syntax, the step's own fields, their values (per size), and --save
    (["--config", "stages"], ["--config", "FIELD=VALUE"]),
    (["--config", "stages=two"], ["--config", "stages: not an integer"]),
    (["--config", "stages=2", "--build-only"], ["step 4's config has no field stages", "block_m, block_n"]),
    (["--config", "vector=3", "--build-only", "--sizes", "256"], ["256x256x256", "vector must be 1, 2 or 4"]),
    (["--config", "block_m=48", "--build-only", "--shape", "96", "64", "64", "--sizes", "64"], ["64x64x64"]),
    (["--config", "vector=2", "--config", "vector=1", "--build-only"], ["--config sets vector twice (2 and 1)"]),
    (["--config", "vector=2", "--save"], ["--save", "--config"]),
])
def test_more_bad_input_is_one_line_and_exit_2(args, words, capsys):
    """As above, in this process (each subprocess imports TVM again)."""
    assert cli.main(4, args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line_error(err, "steps.step4", *words)


def test_build_only_summary():
    proc = run("steps.step4", "--build-only", "--sizes", "512", "1024")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "step 4: cooperative fetch" in out
    assert "512x512x512" in out and "1024x1024x1024" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("512x512x512"))
    threads, smem = row.split()[1:3]
    assert int(threads) == 128 and int(smem) == 6144


def test_config_changes_the_tuned_config_at_every_size(capsys):
    """--config sets fields of the step's tuned config, and only those, at each size: the
    built kernels follow (shared memory is the config's tiles)."""
    sizes = ((256, 256, 256), (512, 512, 512))
    tuned = {size: schedules.get_step(4).default_config(*size) for size in sizes}
    assert cli.main(4, ["--build-only", "--sizes", "256", "512", "--config", "vector=2,block_k=16"]) == 0
    out = capsys.readouterr().out
    for size in sizes:
        want = tuned[size].__class__.from_dict({**tuned[size].as_dict(), "vector": 2, "block_k": 16})
        assert want != tuned[size]
        row = next(line for line in out.splitlines() if line.strip().startswith(options._size(size)))
        assert row.split()[2] == str(want.shared_bytes) and options._config_text(want) in row


def test_config_is_parsed_and_merged():
    args = cli.step_parser("p", "d").parse_args(["--config", "stages=2, pad_a=4", "--config", "stages=2"])
    assert options.config_overrides(args) == {"stages": 2, "pad_a": 4}
    assert options.config_overrides(cli.step_parser("p", "d").parse_args([])) == {}


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_falls_back_to_build_only():
    proc = run("steps.step1", "--sizes", "256")
    assert proc.returncode == 0
    assert "no CUDA GPU found" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "256x256x256" in proc.stdout


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_save_is_an_error(tmp_path):
    proc = run("steps.step6", "--save", "--sizes", "256")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "python -m steps.step6: error: --save needs a CUDA GPU and none was found"


def test_explain_shows_the_diff_and_the_kernel():
    proc = run("steps.step4", "--explain", "--sizes", "256")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "--- step 3 (shared memory)" in out and "+++ step 4 (cooperative fetch)" in out
    assert any(line.startswith("+") and "threadIdx" in line for line in out.splitlines())
    assert 'extern "C" __global__' in out
    assert "#include" not in out  # TVM's preamble is dropped


def test_explain_step1_diffs_against_the_unscheduled_matmul():
    proc = run("steps.step1", "--explain", "--sizes", "64")
    assert proc.returncode == 0, proc.stderr
    assert "--- unscheduled matmul" in proc.stdout
    assert "blockIdx" in proc.stdout


def test_table_renders_rows_and_failures():
    ok = harness.Measurement(512, 512, 512, 0.02, 0.019, 0.03, 13421.8, 4e-7)
    bad = harness.Measurement(1024, 1024, 1024, error="RuntimeError: misaligned address")
    rows = [cli.Row((512, 512, 512), ok, None, "step 3", prior_gflops=6710.9, cublas_gflops=26843.5),
            cli.Row((1024, 1024, 1024), bad, None, "step 3")]
    text = cli.format_table(rows)
    assert "2.00x" in text and "50%" in text and "4.0e-07" in text
    assert "FAILED: RuntimeError: misaligned address" in text
    assert "against step 3" in text


# --- --explain teaches: the idea alone, both configs, the docstring, the helpers, a cut ----------


def _diff_lines(out: str) -> list[str]:
    """The changed lines of --explain's TVMScript diff (not its ---/+++ header)."""
    start = out.index("\n--- ")
    end = out.index("# CUDA kernel")
    return [line for line in out[start:end].splitlines()[3:] if line[:1] in "+-"]


def _binding_extents(lines: list[str]) -> dict[str, set[int]]:
    """{"blockIdx.x": {8, 16}, ...}: the extents each thread axis is bound with in these lines."""
    found: dict[str, set[int]] = {}
    for extent, axis in re.findall(r'T\.thread_binding\((\d+), thread="([\w.]+)"\)', "\n".join(lines)):
        found.setdefault(axis, set()).add(int(extent))
    return found


def test_explain_diffs_the_idea_alone_at_the_default_size():
    """Step 4 at its default size, 512, where its tuned block_n (64) is not step 3's (32): the
    prior is built at step 4's config, so no thread axis is bound with two extents in the diff
    (a tile change rebinds blockIdx/threadIdx with new extents); --tuned-prior shows one."""
    same = run("steps.step4", "--explain")
    tuned = run("steps.step4", "--explain", "--tuned-prior")
    assert same.returncode == 0 and tuned.returncode == 0, same.stderr + tuned.stderr
    assert same.stderr == ""  # the default sizes: no note about several sizes
    assert "# 512x512x512, arch sm_90" in same.stdout
    extents = _binding_extents(_diff_lines(same.stdout))
    assert extents, "the diff binds no threads: not step 4's idea"
    assert all(len(e) == 1 for e in extents.values()), extents
    tuned_extents = _binding_extents(_diff_lines(tuned.stdout))
    assert any(len(e) > 1 for e in tuned_extents.values()), tuned_extents  # the check can see a change
    assert len(_diff_lines(same.stdout)) < len(_diff_lines(tuned.stdout))


def test_explain_header_shows_both_configs_and_the_docstring():
    proc = run("steps.step4", "--explain", "--sizes", "512")
    assert proc.returncode == 0, proc.stderr
    step, prior = schedules.get_step(4), schedules.get_step(3)
    cfg = step.default_config(512, 512, 512)
    shared = prior.Config(**{k: v for k, v in cfg.as_dict().items() if k != "vector"})
    head = proc.stdout[:proc.stdout.index("\n--- ")]
    assert f"# step 4 config: {options._config_text(cfg)}\n" in head
    assert f"# step 3 config: {options._config_text(shared)} (step 4's, so the diff is the idea alone" in head
    assert shared != prior.default_config(512, 512, 512)  # the case the issue saw: block_n 32 -> 64
    for line in step.doc.strip().splitlines():
        assert f"# {line}".rstrip() in head.splitlines()


def test_explain_tuned_prior_header_names_the_priors_own_config():
    proc = run("steps.step4", "--explain", "--sizes", "512", "--tuned-prior")
    assert proc.returncode == 0, proc.stderr
    prior_cfg = schedules.get_step(3).default_config(512, 512, 512)
    assert f"# step 3 config: {options._config_text(prior_cfg)} (step 3's own tuned config, --tuned-prior)" in proc.stdout


@pytest.mark.parametrize("step", schedules.STEPS[1:], ids=lambda s: f"step{s.number}")
def test_each_steps_config_extends_its_priors(step):
    """What --explain relies on to build the prior at the step's config; the one exception is
    the first tensor-core step, whose warp tiles are another kind of config than the CUDA-core
    ladder's thread tiles, the first Hopper rung (warpgroup tiles, not warp tiles), and the
    matrix-vector rung (a thread per 16-byte vector of columns, not a tile): --explain then builds
    the prior at its own tuned config."""
    prior = cli.prior_step(step)  # the step before it, or its PRIOR (step 20's is 18)
    if (step.tensor_cores and not prior.tensor_cores) or (step.arch and not prior.arch) or step.number == 24:
        assert step.number in (12, 15, 24) and not issubclass(step.Config, prior.Config)
        cfg = step.default_config(512, 512, 512)
        prior_cfg, how = cli.prior_config(step, prior, cfg, (512, 512, 512), "sm_90")
        assert prior_cfg == prior.default_config(512, 512, 512)
        assert how == (f"step {prior.number}'s own tuned config: step {step.number}'s "
                       f"{step.Config.__name__} does not extend {prior.Config.__name__}")
        return
    assert issubclass(step.Config, prior.Config)


@pytest.mark.parametrize("n", (512, 1024, 2048))
@pytest.mark.parametrize("step", schedules.STEPS[1:], ids=lambda s: f"step{s.number}")
def test_prior_config_is_the_steps_own_where_it_fits(step, n):
    prior = cli.prior_step(step)
    cfg = step.default_config(n, n, n)
    prior_cfg, how = cli.prior_config(step, prior, cfg, (n, n, n), "sm_90")
    assert type(prior_cfg) is prior.Config and "\n" not in how
    prior_cfg.validate(n, n, n)
    if "own tuned config" in how:  # it does not fit: the prior's tuned config, and why
        assert prior_cfg == prior.default_config(n, n, n)
        # Step 12's config is of another kind than step 11's, step 15's than step 14's, step
        # 24's than step 11's; any other step's does not fit.
        assert ("does not extend" if step.number in (12, 15, 24) else "does not fit") in how
    else:
        assert {k: v for k, v in cfg.as_dict().items() if k in prior_cfg.as_dict()} == prior_cfg.as_dict()


def test_explain_falls_back_to_the_priors_tuned_config_when_the_steps_does_not_fit():
    """Step 2 at 1024 has 64x64 tiles: step 1, one element per thread, would need 4096 threads."""
    proc = run("steps.step2", "--explain", "--sizes", "1024")
    assert proc.returncode == 0, proc.stderr
    tuned = schedules.get_step(1).default_config(1024, 1024, 1024)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("# step 1 config:"))
    assert line == (f"# step 1 config: {options._config_text(tuned)} (step 1's own tuned config: step 2's does "
                    f"not fit step 1: 4096 threads per block (64x64) exceeds the limit of 1024)")


def test_explain_keeps_the_cp_async_helpers_the_kernel_calls():
    proc = run("steps.step7", "--explain", "--sizes", "256")
    assert proc.returncode == 0, proc.stderr
    cuda = proc.stdout[proc.stdout.index("# CUDA kernel"):]
    helpers = re.findall(r"__device__ void (\w+)\(", cuda)
    assert any("cp_async" in h and "commit_group" in h for h in helpers), helpers
    copy = next(h for h in helpers if h.startswith("ptx_cp_async"))
    assert "cp.async.cg.shared.global" in cuda  # the inline asm itself
    kernel = cuda[cuda.index('extern "C" __global__'):]
    for helper in helpers:
        assert f"{helper}(" in kernel, f"{helper} is shown but the kernel does not call it"
    assert f"{copy}(" in kernel
    assert "#include" not in cuda and "#define" not in cuda and "#ifdef" not in cuda


def test_kernel_only_keeps_called_helpers_transitively_and_drops_the_rest():
    source = (
        "#include <cuda.h>\n#define uint unsigned int\n"
        "__forceinline__ __device__ void unused(int x) {\n  asm volatile(\"{\\n}\\n\");\n}\n"
        "__forceinline__ __device__ void inner(int x);\n"
        "__forceinline__ __device__ void inner(int x) {\n"
        "  asm volatile(\"{\\n .reg .pred p;\\n}\\n\" :: \"r\"(x));\n}\n"
        "__forceinline__ __device__ void outer(int x) {\n  if (x) { inner(x); }\n}\n"
        'extern "C" __global__ void k(int* p) {\n  outer(p[0]);\n}\n'
    )
    kept = cli.kernel_only(source)
    assert "unused" not in kept and "#include" not in kept and "#define" not in kept
    assert kept.index("void inner(int x) {") < kept.index("void outer") < kept.index('extern "C"')
    assert kept.count("void inner") == 1  # the definition, not the declaration
    assert kept.endswith("outer(p[0]);\n}\n")


def test_explain_is_cut_at_400_lines_unless_full():
    """Step 10 at an odd shape: ~1,900 lines of unrolled, predicated CUDA."""
    cut = run("steps.step10", "--explain", "--shape", "1000", "1500", "700")
    full = run("steps.step10", "--explain", "--shape", "1000", "1500", "700", "--full")
    assert cut.returncode == 0 and full.returncode == 0, cut.stderr + full.stderr
    lines, all_lines = cut.stdout.splitlines(), full.stdout.splitlines()
    assert len(all_lines) > options.EXPLAIN_LINES
    assert len(lines) == options.EXPLAIN_LINES + 1
    assert lines[:-1] == all_lines[:options.EXPLAIN_LINES]
    assert lines[-1] == (f"# ... {len(all_lines) - options.EXPLAIN_LINES} more lines not shown "
                         f"(--full shows all {len(all_lines)})")
    assert "more lines not shown" not in full.stdout


def test_explain_says_which_of_several_sizes_it_shows():
    proc = run("steps.step4", "--explain", "--sizes", "256", "512", "--shape", "64", "64", "64")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ("python -m steps.step4: note: --explain shows one problem, the first given: "
                           "256x256x256 (of 3)\n")
    assert "# 256x256x256, arch sm_90" in proc.stdout and "512x512x512" not in proc.stdout


def test_python_m_steps_sweep_leaves_torch_unimported(tmp_path):
    """tvm_ffi imports torch wherever it is installed (2.6 s of a sweep's 5.2 s of imports on the
    H100's host); `python -m steps.sweep` never uses it, nor do its build processes, and blocks it.
    A stand-in torch that leaves a mark when imported: `import tvm` alone imports it."""
    fake = tmp_path / "torch"
    fake.mkdir()
    mark = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\nraise ImportError('stand-in')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", "import tvm"], env=env, check=True, cwd=ROOT, timeout=120)
    assert mark.exists(), "the stand-in was not imported: this test would prove nothing"
    mark.unlink()
    done = subprocess.run([sys.executable, "-m", "steps.sweep", "--step", "11", "--shapes", "256x256x256",
                           "--dry-run"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not mark.exists()
