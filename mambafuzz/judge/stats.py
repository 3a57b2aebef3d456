"""Failure-rate statistics: every result is k failures in N repetitions."""
from __future__ import annotations

import math


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (n up to millions)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def rate_upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on the per-repetition failure rate.

    With k == 0 this is 1 - (1 - confidence) ** (1 / n), about 3/n at 95%.
    """
    if n <= 0:
        return 1.0
    if not 0 <= k <= n:
        raise ValueError(f"failures {k} outside 0..{n}")
    if k == n:
        return 1.0
    alpha = 1.0 - confidence
    if k == 0:
        return 1.0 - alpha ** (1.0 / n)
    lo, hi = k / n, 1.0
    for _ in range(60):  # bisection to ~1e-18
        mid = (lo + hi) / 2
        if _binom_cdf(k, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def format_rate(k: int, n: int) -> str:
    if k:
        return f"{k}/{n} failed"
    return f"0/{n} failed (rate < {rate_upper_bound(0, n):.2g} at 95%)"
