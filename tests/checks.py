"""Assertions the test modules share: every rejected input is one line of error."""

import re

import pytest

from schedules import ConfigError


def config_error(fn, *keywords: str) -> str:
    """Run fn, expect a ConfigError whose message is one line mentioning every keyword."""
    with pytest.raises(ConfigError) as info:
        fn()
    msg = str(info.value)
    assert msg.strip(), "empty ConfigError message"
    assert "\n" not in msg, f"multi-line message: {msg!r}"
    for word in keywords:
        assert word in msg, f"{word!r} not in {msg!r}"
    return msg


def skip_unless_it_runs_here(step, arch: str) -> None:
    """The Hopper rungs (steps 15 on, sm_90a) skip, saying why, on a GPU that is not Hopper."""
    if not step.runs_on(arch):
        pytest.skip(f"step {step.number} needs a Hopper GPU ({step.arch}); this GPU is {arch}")


def one_line_error(err: str, prog: str, *words: str) -> str:
    """A command's stderr: exactly one line, ``python -m PROG: error: ...``, with every word."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"python -m {prog}: error:"), lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


# A progress line on stderr: ``[ 3/57]   12.3 s  step 2 512x512x512: built`` (steps/commands/ladder.py).
PROGRESS = re.compile(r"^\[\s*\d+/\d+\] ")


def without_progress(err: str) -> str:
    """A command's stderr less its ``[n/total]`` progress lines."""
    return "".join(line for line in err.splitlines(keepends=True) if not PROGRESS.match(line))


def cuda_kernels(source: str) -> dict[str, str]:
    """The kernels defined in CUDA source TVM generated: {name: its text up to the next kernel}."""
    import re

    out = {}
    for chunk in source.split('extern "C" __global__')[1:]:
        found = re.match(r"\s*void (?:__launch_bounds__\(\d+\) )?(\w+)\([^)]*\)\s*\{", chunk)
        if found:  # a definition, not the declaration before it
            out[found.group(1)] = chunk
    return out
