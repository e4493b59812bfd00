"""Issue 48's fp32-accurate bar, a CPU study: would three fp16 products per output, on operands scaled
by a power of two per row of A and per column of B, keep SGEMM's accuracy on the special-values
suite's classes (steps/measure/special.py)? Emulated in numpy: fp16 x fp16 products are exact in
fp32 and summed in fp32 (float32 matmul); the scaled split is a = 2^-s (ah + al), ah = fp16(a 2^s),
al = fp16(a 2^s - ah), with s putting the row's largest finite |a| in [2^14, 2^15); the product
ah bh + ah bl + al bh (the 3xTF32 terms, in fp16) is unscaled with one ldexp (one rounding), and
outputs that come out NaN are recomputed as a plain fp32 dot product (step 19's fallback).
Compared with: SGEMM's stand-in (numpy float32 matmul) and the 3xTF32 split (step 19's: big =
the fp32 bits with the low 13 cleared, small = the rest, rounded to TF32 by truncation as well).

    python probe/fp16_split_accuracy.py [size]
"""
import sys

import numpy as np

from steps.measure import special

TF32_MASK = np.uint32(0xFFFFE000)


def tf32(x):
    return (x.astype(np.float32).view(np.uint32) & TF32_MASK).view(np.float32)


def f32_dot(a, b):
    with np.errstate(all="ignore"):
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)


def three_tf32(a, b):
    with np.errstate(all="ignore"):
        ab, bb = tf32(a), tf32(b)
        as_, bs = tf32(a - ab), tf32(b - bb)
        return f32_dot(np.concatenate([as_, ab, ab], 1), np.concatenate([bb, bs, bb], 0))


def row_shift(x, axis):
    """Per row (axis 1) or column (axis 0): s with max finite |x| * 2^s in [2^14, 2^15); 0 where none."""
    with np.errstate(all="ignore"):
        m = np.max(np.where(np.isfinite(x), np.abs(x), 0), axis=axis, keepdims=True).astype(np.float64)
        e = np.where(m > 0, np.floor(np.log2(np.where(m > 0, m, 1))), 0)
        return (14 - e).astype(np.int64)


def split16(x, s):
    with np.errstate(all="ignore"):
        xs = np.ldexp(x.astype(np.float64), s).astype(np.float32)  # exact: a power of two, fp32 range kept
        hi = xs.astype(np.float16)
        lo = (xs - hi.astype(np.float32)).astype(np.float16)
        return hi, lo, xs


def three_fp16(a, b, fallback=True, sums=1):
    """sums 1: one fp32 sum over the 3K products (the three operand pairs as one GEMM of K' = 3K);
    sums 2: the big product's sum and the two small ones' sum apart, added at the end."""
    sa, sb = row_shift(a, 1), row_shift(b, 0)
    ah, al, _ = split16(a, sa)
    bh, bl, _ = split16(b, sb)
    with np.errstate(all="ignore"):
        if sums == 1:
            cs = f32_dot(np.concatenate([ah, ah, al], 1), np.concatenate([bh, bl, bh], 0))
        else:
            cs = f32_dot(np.concatenate([ah, al], 1), np.concatenate([bl, bh], 0)) + f32_dot(ah, bh)
        c = np.ldexp(cs.astype(np.float64), -(sa + sb)).astype(np.float32)  # one rounding
    nan = np.isnan(c)
    if fallback and nan.any():
        rows, cols = np.nonzero(nan)
        for i, j in zip(rows, cols):
            c[i, j] = f32_dot(a[i:i + 1], b[:, j:j + 1])[0, 0]
    lost = 0  # elements whose split lost more than the 3xTF32 split would (the fp16 subnormal range)
    for x, s in ((a, sa), (b, sb)):
        hi, lo, xs = split16(x, s)
        with np.errstate(all="ignore"):
            err = np.abs(xs.astype(np.float64) - hi.astype(np.float64) - lo.astype(np.float64))
            lost += int(np.count_nonzero(np.isfinite(xs) & (err > 2.0**-21 * np.abs(xs.astype(np.float64)))))
    return c, int(nan.sum()), lost


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    print(f"{'class':<20} {'SGEMM (numpy f32)':>18} {'3xTF32':>10} {'3xFP16, 1 sum':>14} {'2 sums':>10} {'no fallback':>12}"
          "  NaN outputs  lossy elements  patterns (sgemm, 3xTF32, 3xFP16 1 sum, 2 sums)")
    for dc in special.CLASSES:
        a, b = special.operands(dc, size, 28)
        ref = special.reference(a, b)
        rows = [special.score(f32_dot(a, b), ref), special.score(three_tf32(a, b), ref)]
        c16, nans, lost = three_fp16(a, b)
        rows.append(special.score(c16, ref))
        rows.append(special.score(three_fp16(a, b, sums=2)[0], ref))
        rows.append(special.score(three_fp16(a, b, fallback=False)[0], ref))
        print(f"{dc.name:<20} " + " ".join(f"{r['rel_err']:>{w}.2e}" for r, w in zip(rows, (18, 10, 14, 10, 12)))
              + f"  {nans:>11}  {lost:>14}  " + ", ".join(str(r["pattern_equal"]) for r in rows[:4]), flush=True)


if __name__ == "__main__":
    main()
