"""Bounded statistics: a latency histogram whose size does not grow with the number of calls.

The manager runs for as long as its process does (millions of calls in a training job), so its
statistics are counters and fixed-size histograms, never one entry per call. `LatencyHistogram`
buckets durations logarithmically (BUCKETS_PER_DECADE per factor of ten, from 100 ns to 100 s):
quantiles are exact to within one bucket (about 10 %), which is what a median target needs.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

#: Buckets per factor of ten: a quantile is known to within a factor of 10**(1/24) ~ 1.10.
BUCKETS_PER_DECADE = 24
_LO = 1e-7          # seconds: bucket 0 holds everything below
_DECADES = 9        # 100 ns .. 100 s
_N = BUCKETS_PER_DECADE * _DECADES + 2
#: upper edges of buckets 0 .. _N - 2: bucket b holds (_EDGES[b - 1], _EDGES[b]]; a bisection
#: finds it in a third of the time of the logarithm it stands for
_EDGES = [_LO * 10 ** (k / BUCKETS_PER_DECADE) for k in range(_N - 1)]


class LatencyHistogram:
    """Counts of durations (seconds) in log-spaced buckets; mergeable, fixed size."""

    __slots__ = ("counts", "n", "total")

    def __init__(self) -> None:
        self.counts = [0] * _N
        self.n = 0
        self.total = 0.0

    @classmethod
    def of(cls, samples: Iterable[float]) -> LatencyHistogram:
        h = cls()
        for x in samples:
            h.add(x)
        return h

    @staticmethod
    def _centre(b: int) -> float:
        """Geometric centre of bucket b (its lower edge for bucket 0)."""
        if b == 0:
            return _LO
        return _LO * 10 ** ((b - 0.5) / BUCKETS_PER_DECADE)

    def add(self, x: float) -> None:
        # the bucket: 1 + floor(log10(x / _LO) * BUCKETS_PER_DECADE) above _LO, bisected
        self.counts[bisect_left(_EDGES, x)] += 1
        self.n += 1
        self.total += x

    def merge(self, other: LatencyHistogram) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.n += other.n
        self.total += other.total

    def quantile(self, q: float) -> float:
        """The q-quantile (0 <= q <= 1) to within one bucket; 0.0 when empty."""
        if not self.n:
            return 0.0
        rank = q * (self.n - 1)
        seen = 0
        for b, c in enumerate(self.counts):
            seen += c
            if seen > rank:
                return self._centre(b)
        return self._centre(_N - 1)

    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (f"LatencyHistogram(n={self.n}, median={self.median() * 1e6:.1f} us, "
                f"mean={self.mean * 1e6:.1f} us)")
