"""Command-line front ends for the ladder: ``python -m steps.stepN``.

Each stepN module is a thin wrapper over :mod:`steps.cli`; the GPU work lives in
:mod:`steps.harness`, result files in :mod:`steps.results`, nvcc reports in :mod:`steps.nvcc`.
"""
