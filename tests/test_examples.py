"""Every example runs: each ``python -m steps...`` line that README.md, docs/*.md and the step
docstrings show, and each ```python block of README.md and docs/*.md, run on a machine with no GPU.

What is collected (``collect_markdown``, ``collect_docstring``):

- in a fenced block with no language, sh, bash, shell or console: each line that starts with
  ``python -m steps`` (a trailing ``# comment`` dropped);
- outside fenced blocks: each inline code span that starts with ``python -m steps`` (a span may
  wrap lines);
- in each schedules/step*.py docstring: the lines from ``Run:`` on that start with ``python -m
  steps`` (a ``# comment`` or a remark after two spaces and a parenthesis dropped);
- every ```python block, and the code of each ``python -c "..."`` line of a shell block.

A command with a placeholder (``...``, ``[--opt]``, ``<gpu>``, a metavariable such as N, SLUG,
HOST:PORT, or ``stepN``) is no command, and a few are not run here (SKIP_COMMANDS, below): each
is a skipped test with its reason, so ``-ra`` lists them all.

A command passes without a GPU when it exits 0 (``--build-only``, ``--explain``, ``--list``,
``--dry-run``, a plain ``stepN`` or ``python -m steps``, which build only), or when it needs a
GPU and says so: exit 2 and exactly one line on stderr, ``python -m PROG: error: ...``, saying
that no CUDA GPU was found. Anything else fails, with the command, where it is shown and its
stderr: a traceback, exit 1, exit 2 for another reason (a bad ``--config``, a missing option).
A ```python block passes when it runs to its end as a script of its own (``run_python``).

How they run (``run_command``): in this process, as ``python -m`` runs them (``runpy`` with
``sys.argv`` set, from the project root, stdout and stderr captured), which saves TVM's ~2.5 s
import per command; ``test_in_process_is_python_m`` holds two of them to a real ``python -m``.
A module with no file (``steps.step99``, whose error steps/__init__.py prints while ``python -m``
looks for it) runs as a real ``python -m``. To keep the file cheap (the whole suite has 8 minutes
on two cores):

- each kernel is built once per process (``schedules.build`` memoised by step, size, arch and
  config): ``python -m steps``, its variants and the plain ``stepN`` lines all build the
  default sizes' 57 kernels, so they share one test case (``DEFAULT_SIZES``), 15-30 s;
- nvcc's register report is off (``nvcc.available()`` False, a path the commands print a note
  for): ptxas costs ~1 s a kernel, 64 s for those 57; tests/test_ladder.py and tests/test_cli.py
  run the commands with it;
- ``python -m steps.bench --build-only`` builds 129 kernels in worker processes (3.5 minutes on
  two cores): it runs as written up to its build (options, the shape set, every kernel's config
  checked, the job list), which records what it was asked to build instead (PARTIAL);
  tests/test_bench.py runs that build path, workers and all, on two steps and shapes.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

import schedules
from steps.commands import bench
from steps.measure import harness, nvcc

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "python -m steps"

# Commands run nowhere here, each with why (the others with a placeholder are skipped by rule).
SKIP_COMMANDS = {
    "python -m steps.plot": "rewrites results/<gpu>/*.png; tests/test_report_writes.py runs it in a copy of the tree",
    "python -m steps.table --readme": "rewrites README.md and docs/measured.md; tests/test_report_writes.py runs it "
                                      "in a copy of the tree",
    "python -m steps.sweep": "the command's name in prose: a sweep needs --step N",
    "python -m steps.rpc_pool": "the command's name in prose: it starts a tracker and RPC servers and serves until "
                                "Ctrl-C (tests/test_rpc.py starts them)",
}


def _argv(command: str) -> list[str] | None:
    """The command's words as a shell splits them, or None where it cannot (a quote left open)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    return argv if argv[:2] == ["python", "-m"] and len(argv) > 2 else None


def skip_reason(command: str) -> str | None:
    """Why `command` (a documented line, comment dropped) is not run here, or None."""
    if command in SKIP_COMMANDS:
        return SKIP_COMMANDS[command]
    if "..." in command or "\u2026" in command:
        return "a placeholder (...)"
    if "[" in command:
        return "optional parts in [brackets]"
    if "<" in command:
        return "a placeholder in <angle brackets>"
    if re.search(r"\bstep[A-Z]\b", command):
        return "stepN: any step"
    words = [w for w in command.split() if not w.startswith("-")]
    meta = [w for w in words if re.fullmatch(r"[A-Z][A-Z0-9_]*(:[A-Z][A-Z0-9_]*)?", w)]
    if meta:
        return f"a metavariable ({', '.join(meta)})"
    argv = _argv(command)
    if argv is None:
        return None  # unbalanced quotes: run, and fail there
    if argv[2] == "steps.rpc_pool":
        return "starts a tracker and RPC servers and serves until Ctrl-C (tests/test_rpc.py starts them)"
    if argv[2] == "steps.sweep" and "--tracker" in argv:
        return "measures on the servers of an RPC tracker (head:9190 is the example's host) and writes --log"
    return None


# Run as written up to the work that would take minutes on a CPU; what stands in for that work.
PARTIAL = {
    "python -m steps.bench --build-only": (bench, "build_only", "129 kernels in worker processes: 3.5 min on 2 cores"),
}


# --- the collector ------------------------------------------------------------------------------


@dataclass
class Example:
    kind: str  # "command" or "python"
    text: str  # the command line (comment dropped) or the block's code
    sources: list[str] = field(default_factory=list)  # "docs/usage.md:13", where it is shown
    skip: str | None = None  # why it is not run here

    def where(self) -> str:
        return ", ".join(self.sources)


FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
SHELL = {"", "sh", "bash", "shell", "console"}


def _without_comment(line: str) -> str:
    """`line` up to a ``#`` that starts a shell comment (outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _command(text: str, source: str) -> Example:
    text = " ".join(text.split())
    return Example("command", text, [source], skip_reason(text))


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def collect_markdown(path: Path) -> list[Example]:
    """The commands and ```python blocks of one markdown file, in the order they appear."""
    name = _rel(path)
    found: list[Example] = []
    fence = None  # (marker, language, first line number, lines)
    paragraph: list[tuple[int, str]] = []

    def spans():
        """The `python -m steps...` code spans of the paragraph gathered so far."""
        text, starts = "", []
        for number, line in paragraph:
            starts.append((len(text), number))
            text += line + "\n"
        for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
            body = " ".join(match[1].split())
            if body.startswith(PREFIX) and (len(body) == len(PREFIX) or body[len(PREFIX)] in " ."):
                number = max(n for offset, n in starts if offset <= match.start())
                found.append(_command(body, f"{name}:{number}"))
        paragraph.clear()

    for number, line in enumerate(path.read_text().splitlines(), 1):
        if fence is not None:
            if line.strip().startswith(fence[0]) and not line.strip()[len(fence[0]):].strip():
                marker, language, start, lines = fence
                if language == "python":
                    found.append(Example("python", "\n".join(lines), [f"{name}:{start}"]))
                elif language in SHELL:
                    for offset, text in enumerate(lines, start + 1):
                        text = text.strip().removeprefix("$ ")
                        if text.startswith(PREFIX):
                            found.append(_command(_without_comment(text), f"{name}:{offset}"))
                        elif text.startswith(("python -c ", "python3 -c ")):  # its code, as a block
                            found.append(Example("python", shlex.split(text, comments=True)[2], [f"{name}:{offset}"]))
                fence = None
            else:
                fence[3].append(line)
            continue
        opened = FENCE.match(line)
        if opened:
            spans()
            fence = (opened[1], opened[2].lower(), number, [])
        elif not line.strip():
            spans()
        else:
            paragraph.append((number, line))
    spans()
    return found


def collect_docstring(path: Path) -> list[Example]:
    """The ``Run:`` commands of one module's docstring."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree, clean=False) or ""
    first = tree.body[0].lineno if tree.body else 1  # the docstring's first line in the file
    found, running = [], False
    for offset, line in enumerate(doc.splitlines()):
        text = line.strip()
        if text.startswith("Run:"):
            running, text = True, text[len("Run:"):].strip()
        if running and text.startswith(PREFIX):
            text = re.sub(r"\s{2,}\(.*$", "", _without_comment(text))
            found.append(_command(text, f"{_rel(path)}:{first + offset}"))
    return found


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def step_modules() -> list[Path]:
    return sorted((ROOT / "schedules").glob("step*.py"), key=lambda p: [int(t) if t.isdigit() else t
                                                                        for t in re.split(r"(\d+)", p.name)])


def collect(markdown: list[Path], modules: list[Path]) -> list[Example]:
    """Every example of the files, each command once (with every place it is shown)."""
    out: dict[tuple[str, str], Example] = {}
    found = [e for p in markdown for e in collect_markdown(p)] + [e for p in modules for e in collect_docstring(p)]
    for example in found:
        key = (example.kind, example.text)
        if key in out:
            out[key].sources += example.sources
        else:
            out[key] = example
    return list(out.values())


# --- the runner ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str


_real_build = schedules.build
_built: dict = {}


def _build_once(step, M, N, K, arch="sm_90", config=None, epilogue=None, fused=True, dtype="fp32"):
    """schedules.build, each (step, size, arch, config, dtype) compiled once in this process."""
    if epilogue is not None:
        return _real_build(step, M, N, K, arch=arch, config=config, epilogue=epilogue, fused=fused)
    s = schedules.get_step(step)
    cfg = s.default_config(M, N, K, dtype) if config is None else config
    key = (s.number, M, N, K, arch, type(cfg).__name__, repr(cfg), dtype)
    if key not in _built:
        _built[key] = _real_build(step, M, N, K, arch=arch, config=cfg, **({} if dtype == "fp32" else {"dtype": dtype}))
    return _built[key]


@contextlib.contextmanager
def _cheap():
    """Builds shared across commands, nvcc's register report off (see the module docstring)."""
    with mock.patch.object(schedules, "build", _build_once), mock.patch.object(nvcc, "available", lambda: False):
        yield


@contextlib.contextmanager
def _partial(command: str, calls: list):
    """For a PARTIAL command: its costly function records its arguments and returns 0."""
    if command not in PARTIAL:
        yield
        return
    module, name, _ = PARTIAL[command]

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return 0

    with mock.patch.object(module, name, record):
        yield


def run_command(command: str, in_process: bool = True) -> Outcome:
    """Run a documented command line as ``python -m`` would, from the project root."""
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    module, args = argv[2], argv[3:]
    if not in_process or importlib.util.find_spec(module) is None:
        proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv[:], os.getcwd()
    code = 0
    # runpy warns (on stderr) about a module imported before it runs as __main__; python -m
    # starts with none imported
    entry = sys.modules.pop(module, None) if not module.endswith(".__main__") else None
    try:
        os.chdir(ROOT)
        sys.argv = [module, *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _cheap():
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as done:
                if done.code is None or isinstance(done.code, int):
                    code = done.code or 0
                else:  # SystemExit("message"): Python prints it and exits 1
                    print(done.code, file=sys.stderr)
                    code = 1
            except BaseException:  # noqa: BLE001 - a traceback is what the example fails with
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        if entry is not None:
            sys.modules[module] = entry
    return Outcome(code, out.getvalue(), err.getvalue())


NO_GPU = re.compile(r"\bno CUDA GPU found\b|\bCUDA GPU(?: and|;) none was found\b")


def verdict(command: str, outcome: Outcome) -> str | None:
    """None when the command passes without a GPU (module docstring), else why it fails."""
    if outcome.code == 0 and "Traceback (most recent call last)" not in outcome.err:
        return None
    lines = outcome.err.strip().splitlines()
    prog = shlex.split(command)[2]
    if (outcome.code == 2 and len(lines) == 1 and lines[0].startswith(f"python -m {prog}: error: ")
            and NO_GPU.search(lines[0])):
        return None
    tail = "\n".join(lines[-15:]) or "(nothing on stderr)"
    return f"exit {outcome.code}, not 0 nor 2 with one line that a GPU is needed; stderr:\n{tail}"


def check_command(example: Example) -> str | None:
    """Run one collected command: None if it passes, else a message naming it and where it is."""
    calls: list = []
    if _argv(example.text) is None:
        return f"{example.text}  ({example.where()}): not a command line a shell can split"
    with _partial(example.text, calls):
        outcome = run_command(example.text)
    why = verdict(example.text, outcome)
    if why is None and example.text in PARTIAL and not calls:
        why = f"exit {outcome.code} before reaching {PARTIAL[example.text][1]}"
    return None if why is None else f"{example.text}  ({example.where()}): {why}"


def run_python(code: str, source: str = "<example>") -> str | None:
    """Run a ```python block as a script of its own (a file, so that TVMScript can read the
    source of what it parses), from the project root: None if it runs to its end, else the error."""
    out = io.StringIO()
    saved_cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / (re.sub(r"\W+", "_", source).strip("_") + ".py")
        script.write_text(code + "\n")
        try:
            os.chdir(ROOT)
            with contextlib.redirect_stdout(out):
                runpy.run_path(str(script), run_name="__main__")
        except BaseException:  # noqa: BLE001
            return f"```python at {source} raised:\n{traceback.format_exc(limit=-3)}"
        finally:
            os.chdir(saved_cwd)
    return None


# --- the examples of this tree ----------------------------------------------------------------------

EXAMPLES = collect(documents(), step_modules())
COMMANDS = [e for e in EXAMPLES if e.kind == "command"]
SNIPPETS = [e for e in EXAMPLES if e.kind == "python"]
SKIPPED = [(e.text, e.where(), e.skip) for e in COMMANDS if e.skip]  # printed by -ra, one per test


def _default_sizes(example: Example) -> bool:
    """A ladder or step command that builds the default sizes' kernels (512, 1024, 2048)."""
    argv = _argv(example.text) or ["python", "-m", ""]
    return (re.fullmatch(r"steps(\.step\d+)?", argv[2]) is not None
            and not {"--sizes", "--shape", "--config", "--arch"} & set(argv))


DEFAULT_SIZES = [e for e in COMMANDS if not e.skip and _default_sizes(e)]
ALONE = [e for e in COMMANDS if not e.skip and not _default_sizes(e)]


def _cases():
    if DEFAULT_SIZES:  # first, so that a worker starts the longest case first
        yield pytest.param(DEFAULT_SIZES, id=f"default sizes ({len(DEFAULT_SIZES)} commands)")
    for e in ALONE:
        yield pytest.param([e], id=e.text + (" (up to its build)" if e.text in PARTIAL else ""))
    for e in COMMANDS:
        if e.skip:
            yield pytest.param([e], id=e.text, marks=pytest.mark.skip(reason=f"{e.text} ({e.where()}): {e.skip}"))


# The examples are run as on a machine with no GPU (what the README promises a newcomer); where a
# GPU is, the same lines would time kernels for minutes and their --save would write results/.
WITHOUT_A_GPU = pytest.mark.skipif(harness.gpu_present(), reason="the examples run as on a machine with no GPU; "
                                   "here one would time kernels and --save would write results/")


@WITHOUT_A_GPU
@pytest.mark.parametrize("examples", list(_cases()))
def test_documented_command_runs(examples):
    failures = [msg for msg in map(check_command, examples) if msg]
    assert not failures, "\n\n".join(failures)


@WITHOUT_A_GPU
@pytest.mark.parametrize("example", SNIPPETS, ids=lambda e: e.where())
def test_documented_python_runs(example):
    failure = run_python(example.text, example.where())
    assert failure is None, failure


def test_the_examples_are_found():
    """The collector sees what the documents show: a floor, so an example lost to a change of the
    collector (or of the markdown) fails here rather than passing unrun."""
    where = {s.split(":")[0] for e in EXAMPLES for s in e.sources}
    assert {"README.md", "docs/usage.md", "schedules/step13_tc_pipeline.py", "schedules/step1_grid.py"} <= where
    assert len(DEFAULT_SIZES) >= 19 and len(ALONE) >= 30 and len(SNIPPETS) >= 2, (len(DEFAULT_SIZES), len(ALONE))
    assert [e.text for e in COMMANDS if "steps.step15" in e.text] == ["python -m steps.step15"]  # remark dropped


@WITHOUT_A_GPU
def test_in_process_is_python_m():
    """The in-process run gives what a real ``python -m`` gives: exit code, stdout, stderr."""
    for command in ("python -m steps.bench --list", "python -m steps.step6 --sizes 1024 2048 --repeat 50 --save"):
        assert run_command(command) == run_command(command, in_process=False), command


# --- a planted broken example: the collector finds it and the runner fails it ------------------------

PLANTED = '''# A page

Text with `python -m steps.bench --list` inline, and a span that wraps: `python -m
steps.sweep --step 7 --sizes 1024 --dry-run`, and `python -m steps.stepN --explain` (a name).

```
python -m steps.step1 --explain                            # works
python -m steps.step13 --sizes 2048 --config stages=2      # broken: fragment_buffers 2 needs 3 stages
```

```bash
$ python -m steps.step4 --no-such-option
```

```python
import schedules
print(schedules.STEPS[0].name)
```

```python
import schedules
schedules.references.dlight_module(64, 64, 64)  # an attribute of a module never imported
```
'''

PLANTED_STEP = '''"""Step 99: a docstring.

Run: python -m steps.step1 --sizes 64 --build-only   (a remark)
     python -m steps.step99 --build-only             # no such step
"""
'''


@WITHOUT_A_GPU
def test_a_planted_broken_example_fails(tmp_path):
    page, module = tmp_path / "page.md", tmp_path / "step99_planted.py"
    page.write_text(PLANTED)
    module.write_text(PLANTED_STEP)
    examples = collect([page], [module])
    commands = {e.text: e for e in examples if e.kind == "command"}
    assert list(commands) == [
        "python -m steps.bench --list", "python -m steps.sweep --step 7 --sizes 1024 --dry-run",
        "python -m steps.stepN --explain", "python -m steps.step1 --explain",
        "python -m steps.step13 --sizes 2048 --config stages=2", "python -m steps.step4 --no-such-option",
        "python -m steps.step1 --sizes 64 --build-only", "python -m steps.step99 --build-only"]
    assert commands["python -m steps.stepN --explain"].skip == "stepN: any step"
    assert commands["python -m steps.sweep --step 7 --sizes 1024 --dry-run"].sources == [f"{page}:3"]  # wraps
    assert commands["python -m steps.step13 --sizes 2048 --config stages=2"].sources == [f"{page}:8"]
    assert commands["python -m steps.step99 --build-only"].sources == [f"{module}:4"]

    results = {text: check_command(e) for text, e in commands.items() if not e.skip}
    broken = {text: msg for text, msg in results.items() if msg}
    assert set(broken) == {"python -m steps.step13 --sizes 2048 --config stages=2",
                           "python -m steps.step4 --no-such-option", "python -m steps.step99 --build-only"}
    assert f"{page}:8" in broken["python -m steps.step13 --sizes 2048 --config stages=2"]
    assert "exit 2" in broken["python -m steps.step13 --sizes 2048 --config stages=2"]
    assert "fragment_buffers 2 needs stages >= 3" in broken["python -m steps.step13 --sizes 2048 --config stages=2"]
    assert "unrecognized arguments: --no-such-option" in broken["python -m steps.step4 --no-such-option"]
    assert "unknown step 99" in broken["python -m steps.step99 --build-only"]  # a real python -m

    works, fails = [e for e in examples if e.kind == "python"]
    assert run_python(works.text, works.where()) is None
    failure = run_python(fails.text, fails.where())
    assert failure is not None and "AttributeError" in failure and f"{page}:20" in failure


def test_gpu_needed_is_the_only_exit_2_that_passes():
    gpu = "python -m steps.cublas: error: the references are timed on a CUDA GPU and none was found\n"
    assert verdict("python -m steps.cublas", Outcome(2, "", gpu)) is None
    assert verdict("python -m steps.cublas", Outcome(2, "", gpu + gpu))  # two lines
    assert verdict("python -m steps.cublas", Outcome(1, "", gpu))  # exit 1
    assert verdict("python -m steps.bench", Outcome(2, "", gpu))  # another command's line
    assert verdict("python -m steps.step13", Outcome(2, "", "python -m steps.step13: error: 2048x2048x2048: "
                                                            "fragment_buffers 2 needs stages >= 3, got stages 2\n"))
    assert verdict("python -m steps", Outcome(0, "table\n", "[1/1]    0.1 s  step 1 64x64x64: built\n")) is None


def broken_links(paths: list[Path]) -> list[str]:
    """Every relative markdown link ``[text](target)`` in `paths` whose target does not exist."""
    bad = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line):
                target = match[1]
                if not re.match(r"[a-z]+:", target) and not (path.parent / target).exists():
                    bad.append(f"{_rel(path)}:{number}: {target}")
    return bad


def test_every_relative_link_in_the_docs_resolves(tmp_path):
    """A newcomer follows the README's and docs' links: each one leads to a file that exists
    (the results pages too); a planted broken link is found."""
    pages = documents() + sorted((ROOT / "results").glob("*/README.md"))
    assert not broken_links(pages), "\n".join(broken_links(pages))
    planted = tmp_path / "page.md"
    planted.write_text("[ok](page.md) and [gone](no/such/file.md) and [web](https://example.com)\n")
    assert broken_links([planted]) == [f"{planted}:1: no/such/file.md"]
