"""Whether two sweeps of the same candidates picked the same winners, and by how much they differ.

    python tools/winners.py logs/rpc-wall-local-1.jsonl logs/rpc-wall-rpc-1.jsonl [--band 0.025]

Two sweeps never time alike. One compiled kernel reads 1.6-2.2% faster or slower from one
process to another, or against a byte-identical copy of itself in the same process
(results/nvidia-h200/evidence/rpc_scaling_tries.txt, session 7), so finalists within ~2% have
no order a timing reproduces, and two runs of the same sweep on one GPU pick differently too.
A sweep's winner is its confirmation's pick where it timed the shape's finalists again
(steps.sweep --confirm), with those timings; else its fastest. Per shape the verdict is:

  same        both picked the same config;
  within      each pick, timed by the other run, is within --band (default 2.5%, above the
              measured spread) of that run's own pick: the picks are equally good;
  DIFFERENT   otherwise: both timings are printed (each pick's GFLOPS in each run).

Exit 0 when every shape is the same or within the band, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BAND = 0.025  # above the 1.6-2.2% one kernel reads apart between processes


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


def compare(rows_a: list[dict], rows_b: list[dict], band: float = BAND) -> list[dict]:
    """Per shape both logs measured: each log's winner (its confirmation's pick, else its
    fastest), and each winner's GFLOPS in the other log as a fraction of that log's winner's;
    verdict "same", "within" (each pick within `band` of the other run's own) or "DIFFERENT"."""
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
            row.update(b_pick_in_a=round(b_in_a, 4), a_pick_in_b=round(a_in_b, 4),
                       # both timings of both picks: GFLOPS in a, then in b (None: not timed there)
                       a_pick_gflops=[a[shape][win_a], b[shape].get(win_a)],
                       b_pick_gflops=[a[shape].get(win_b), b[shape][win_b]])
            row["verdict"] = "within" if min(b_in_a, a_in_b) >= 1 - band else "DIFFERENT"
        out.append(row)
    return out


def summary(rows: list[dict], band: float = BAND) -> str:
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("same", "within", "DIFFERENT")}
    gaps = [1 - min(r["b_pick_in_a"], r["a_pick_in_b"]) for r in rows if r["verdict"] != "same"]
    worst = f", the widest gap {max(gaps):.2%}" if gaps else ""
    return (f"{len(rows)} shapes: {count['same']} the same winner, {count['within']} within the {band:.1%} band, "
            f"{count['DIFFERENT']} different{worst}")


def _gflops(value) -> str:
    return "not timed" if value is None else f"{value:.1f}"


def describe(row: dict, a: str, b: str) -> str:
    """One line for a shape whose picks differ: each pick as the other run timed it, and for a
    DIFFERENT one both timings of both picks (GFLOPS)."""
    text = (f"{row['verdict']}: {b}'s pick at {row['b_pick_in_a']:.2%} in {a}, "
            f"{a}'s at {row['a_pick_in_b']:.2%} in {b}")
    if row["verdict"] == "DIFFERENT":
        text += (f" ({a}'s pick {row['a']}: {_gflops(row['a_pick_gflops'][0])} / {_gflops(row['a_pick_gflops'][1])} GFLOPS "
                 f"in {a} / {b}; {b}'s pick {row['b']}: {_gflops(row['b_pick_gflops'][0])} / "
                 f"{_gflops(row['b_pick_gflops'][1])})")
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/winners.py", description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--band", type=float, default=BAND,
                   help=f"how far apart two equally good picks may read (default {BAND})")
    args = p.parse_args(argv)
    try:
        rows = compare(load(args.a), load(args.b), args.band)
    except (OSError, ValueError, KeyError) as exc:
        print(f"winners: error: {exc}", file=sys.stderr)
        return 2
    for r in rows:
        if r["verdict"] == "same":
            print(f"{r['shape']:>16}  same")
        else:
            print(f"{r['shape']:>16}  {describe(r, args.a.name, args.b.name)}")
    print(summary(rows, args.band))
    return 0 if all(r["verdict"] != "DIFFERENT" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
