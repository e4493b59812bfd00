"""python -m steps: every step of the ladder in one run; see steps/commands/ladder.py and --help."""

from .commands.ladder import main

if __name__ == "__main__":
    raise SystemExit(main())
