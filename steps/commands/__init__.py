"""What each command does: its options, its run, what it prints (entry points: steps/*.py).

Imports from report/, measure/ and results/ below it; never from the entry points above.
docs/maintaining.md has the map of steps/.
"""
