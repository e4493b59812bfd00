"""The step CLIs without a GPU: help, clean one-line errors (exit 2), build-only, explain."""

import importlib
import re
import subprocess
import sys

import pytest

import schedules
from steps import cli, cublas, harness, ladder, nvcc, sweep

from .checks import one_line_error

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
                     "--compare"}, set()),
    "steps": ({"--sizes", "--shape", "--repeat", "--arch", "--seed", "--save", "--build-only", "--compare",
               "--steps"}, {"--explain", "--tuned-prior", "--full"}),
    "steps.sweep": ({"--sizes", "--shape", "--repeat", "--arch", "--step", "--top", "--workers", "--write",
                     "--dry-run", "--log"}, {"--save", "--build-only", "--explain", "--compare", "--seed"}),
    "steps.cublas": ({"--sizes", "--shape", "--repeat", "--seed", "--tf32"},
                     {"--arch", "--save", "--build-only", "--explain", "--compare"}),
}


def _help_of(prog, capsys) -> str:
    mains = {"steps.step4": lambda argv: cli.main(4, argv), "steps": ladder.main, "steps.sweep": sweep.main,
             "steps.cublas": cublas.main}
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


@pytest.mark.parametrize("cpus, workers", [(2, 2), (1, 1), (None, 1), (16, 12), (128, 12)])
def test_sweep_workers_default_to_the_cpu_count(monkeypatch, cpus, workers):
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: cpus)
    p = sweep.parser("p")
    assert p.parse_args(["--step", "7"]).workers == workers
    action = next(a for a in p._actions if "--workers" in a.option_strings)
    assert "the CPU count" in action.help and f"{workers} here" in action.help


def test_repeated_sizes_accumulate(monkeypatch, capsys):
    args = cli.step_parser("p", "d").parse_args(["--sizes", "512", "--sizes", "1024", "2048", "--sizes", "512"])
    assert cli.requested_shapes(args) == [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]
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
    assert cli.resolve_arch(requested, gpu, timing) == (arch, None)


@pytest.mark.parametrize("gpu", ["sm_75", "sm_100", "sm_120", "sm_70"])
def test_an_unsupported_gpu_builds_for_sm_90_with_a_note(gpu):
    arch, note = cli.resolve_arch(None, gpu, timing=False)
    assert arch == "sm_90"
    assert "\n" not in note and gpu in note and SUPPORTED in note and "--arch" in note


@pytest.mark.parametrize("requested", [None, "sm_90"])
@pytest.mark.parametrize("gpu", ["sm_75", "sm_100", "sm_120"])
def test_an_unsupported_gpu_cannot_time(gpu, requested):
    with pytest.raises(cli.UsageError) as info:
        cli.resolve_arch(requested, gpu, timing=True)
    msg = str(info.value)
    assert "\n" not in msg and f"this GPU is {gpu}" in msg and SUPPORTED in msg
    assert "--build-only --arch sm_90" in msg


def test_an_unknown_requested_arch_is_still_an_error():
    with pytest.raises(schedules.ConfigError, match="unknown arch 'sm_75'"):
        cli.resolve_arch("sm_75", "sm_90", timing=False)


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
    assert err.strip().splitlines() == [f"python -m {prog}: {NOTE} (--arch picks another)"]
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


def test_a_registered_step_without_a_module_runs_the_step_cli():
    """The finder serves any steps.stepN no file provides: a step added to the registry runs
    without a stepN.py (shown with step 4, its file bypassed)."""
    code = ("import sys, steps\n"
            "spec = steps._StepCLIFinder().find_spec('steps.step4')\n"
            "sys.argv = ['x', '--build-only', '--sizes', '64']\n"
            "exec(spec.loader.get_code('steps.step4'), {'__name__': '__main__'})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "step 4: cooperative fetch" in proc.stdout and "64x64x64" in proc.stdout


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

