"""python -m steps.model: a transformer block's linear layers through TVM with the ladder's kernels,
with dlight's defaults, and in PyTorch eager fp32 (steps/commands/model.py)."""

from .commands.model import main

if __name__ == "__main__":
    raise SystemExit(main())
