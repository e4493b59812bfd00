"""python -m steps.epilogue: a bias and an activation fused into the matmul's store, against the
bare matmul and against the same epilogue as a kernel of its own (steps/commands/epilogue.py)."""

from .commands.epilogue import main

if __name__ == "__main__":
    raise SystemExit(main())
