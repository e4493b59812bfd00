"""Whether two sweeps of the same candidates picked the same winners, and by how much they differ.

    python tools/winners.py logs/rpc-wall-local-1.jsonl logs/rpc-wall-rpc-1.jsonl

Two sweeps never time alike, and a shape's best few candidates are often within 1% of each
other (step 11's rasters differ by 0.2-0.7% on the H100): two local runs of the same
candidates then pick different winners too. A sweep's winner is its confirmation's pick where
it timed the shape's finalists again (steps.sweep --confirm), with those timings; else its
fastest. So per shape this says: the same config, or,
where not, how each log timed the other's winner against its own best ("tie at 99.6% / 99.8%":
each pick is within 0.4% of the best in the other's timings). A pair of picks counts as a tie
when both are within --noise (default 1%) of the best; anything more is DIFFERENT.
Exit 0 when every shape is the same or a tie, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NOISE = 0.01


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def timed(rows: list[dict]) -> dict:
    """{shape: {config json: GFLOPS}} of the candidates measured without error; where the sweep
    timed a shape's finalists again (its "confirm" rows), those timings replace the first."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: r.get("stage") == "confirm"):  # stable: confirmations last
        if "error" not in r and "gflops" in r:
            out.setdefault((r["M"], r["N"], r["K"]), {})[json.dumps(r["config"], sort_keys=True)] = r["gflops"]
    return out


def picks(rows: list[dict]) -> dict:
    """{shape: config json} of the finalist each confirmation kept (steps.sweep's pick), where one did."""
    return {(r["M"], r["N"], r["K"]): json.dumps(r["config"], sort_keys=True)
            for r in rows if r.get("stage") == "confirm" and r.get("pick")}


def compare(rows_a: list[dict], rows_b: list[dict], noise: float = NOISE) -> list[dict]:
    """Per shape both logs measured: each log's winner (its confirmation's pick, else its
    fastest), and each winner's GFLOPS in the other log as a fraction of that log's winner's;
    verdict "same", "tie" or "DIFFERENT"."""
    a, b = timed(rows_a), timed(rows_b)
    picked_a, picked_b = picks(rows_a), picks(rows_b)
    out = []
    for shape in sorted(set(a) & set(b)):
        win_a = picked_a.get(shape) or max(a[shape], key=a[shape].get)
        win_b = picked_b.get(shape) or max(b[shape], key=b[shape].get)
        row = {"shape": "x".join(map(str, shape)), "a": win_a, "b": win_b,
               "a_best_gflops": a[shape][win_a], "b_best_gflops": b[shape][win_b]}
        if win_a == win_b:
            row["verdict"] = "same"
        else:
            # b's pick as a timed it, a's pick as b timed it (None: one log lacks the other's pick)
            b_in_a = a[shape].get(win_b, 0.0) / a[shape][win_a]
            a_in_b = b[shape].get(win_a, 0.0) / b[shape][win_b]
            row.update(b_pick_in_a=round(b_in_a, 4), a_pick_in_b=round(a_in_b, 4))
            row["verdict"] = "tie" if min(b_in_a, a_in_b) >= 1 - noise else "DIFFERENT"
        out.append(row)
    return out


def summary(rows: list[dict]) -> str:
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("same", "tie", "DIFFERENT")}
    gaps = [1 - min(r["b_pick_in_a"], r["a_pick_in_b"]) for r in rows if r["verdict"] != "same"]
    worst = f", the widest gap {max(gaps):.2%}" if gaps else ""
    return (f"{len(rows)} shapes: {count['same']} the same winner, {count['tie']} ties within noise, "
            f"{count['DIFFERENT']} different{worst}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/winners.py", description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--noise", type=float, default=NOISE, help="the gap a tie may have (default 0.01)")
    args = p.parse_args(argv)
    try:
        rows = compare(load(args.a), load(args.b), args.noise)
    except (OSError, ValueError, KeyError) as exc:
        print(f"winners: error: {exc}", file=sys.stderr)
        return 2
    for r in rows:
        if r["verdict"] == "same":
            print(f"{r['shape']:>16}  same")
        else:
            print(f"{r['shape']:>16}  {r['verdict']}: {args.b.name}'s pick at {r['b_pick_in_a']:.2%} in "
                  f"{args.a.name}, {args.a.name}'s at {r['a_pick_in_b']:.2%} in {args.b.name}")
    print(summary(rows))
    return 0 if all(r["verdict"] != "DIFFERENT" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
