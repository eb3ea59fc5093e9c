#!/usr/bin/env python3
"""Regenerates kLog2NormalTail in glu_kernels.h: log2 Q(a), Q the standard
normal's upper tail, on each unit interval [i, i + 1), i = 0..15, as a degree-5
polynomial in a - i.

Each interval's polynomial is fitted to float64 log2 Q by least squares,
reweighted (Lawson) towards the least maximum of the error over the bound the
GLU tests allow for fp32's own error in Phi, 2^-21 (4 + a^2/2) relative
(log2 units: that over ln 2).  The coefficients are rounded to float and the
error of an fp32 Horner evaluation is reported as a share of that bound.

Run with numpy:  python3 glu/fit_normal_tail.py
"""
import math

import numpy as np

DEGREE = 5
INTERVALS = 16


def log2_tail(a):
    return math.log2(0.5 * math.erfc(a / math.sqrt(2.0)))


def bound_log2(a):
    return 2.0**-21 * (4.0 + a * a / 2.0) / math.log(2.0)


def fit_interval(i):
    x = np.linspace(0.0, 1.0, 1000)
    want = np.array([log2_tail(i + v) for v in x])
    weight = np.array([1.0 / bound_log2(i + v) for v in x])
    basis = np.vander(x, DEGREE + 1)
    lawson = np.ones_like(x)
    best = None
    for _ in range(60):
        w = weight * np.sqrt(lawson)
        coef, *_ = np.linalg.lstsq(basis * w[:, None], want * w, rcond=None)
        err = np.abs(basis @ coef - want) * weight
        if best is None or err.max() < best[0]:
            best = (err.max(), coef)
        lawson *= err / err.max() + 1e-3
        lawson /= lawson.mean()
    coef = np.float32(best[1])
    p = coef[0]
    x32 = np.float32(x)
    for c in coef[1:]:
        p = np.float32(p * x32 + c)
    horner = (np.abs(p.astype(np.float64) - want) * weight).max()
    return coef, best[0], horner


def main():
    rows = []
    for i in range(INTERVALS):
        coef, fitted, horner = fit_interval(i)
        rows.append(coef)
        print(f"// [{i:2d}, {i + 1:2d}): fit {fitted:.4f}, fp32 Horner {horner:.4f} of the bound")
    table = np.array(rows)
    for k in range(DEGREE + 1):
        print("    {" + ", ".join("%.9g" % v for v in table[:, k]) + "},")


if __name__ == "__main__":
    main()
