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
