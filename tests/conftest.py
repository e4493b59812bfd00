"""GPU tests are marked ``@pytest.mark.gpu`` and skip, with the reason, where no CUDA GPU exists."""

import pytest

from steps.measure import harness


def pytest_collection_modifyitems(config, items):
    if harness.gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU: tvm.cuda(0) does not exist on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: without a GPU, one worker more than the cores (many tests wait on a spawned
    process or an RPC session: on 2 cores 3 workers took 5 min 41 s, 2 took 6 min 24 s), at most
    8 (a worker peaks near 0.7 GB); with a GPU, none: the tests run in this process, one after
    another, as the harness's timings need."""
    if harness.gpu_present():
        return 0
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores + 1, 8)
