"""Which cache is a file's home: rendezvous (highest-random-weight) hashing of the logical file name over the caches.

Every (cache, file) pair gets a pseudo-random score from SHA-256 of the two names; a file's caches, best first, are
the caches ordered by score, and its home is the first. Weighted as in "weighted rendezvous hashing" (score =
-weight / ln u, u uniform in (0, 1)), so a cache of weight 2 is home to twice as many files as one of weight 1.
Stable across runs and machines (nothing but the names goes in); adding or removing one of N caches moves only the
files whose home it becomes or was, about 1/N of them. ``modulo_home`` is the plain ``sha256(name) % N`` that the
200 Gbps challenge used, for comparison: adding a cache there moves almost every file.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence


def _unit(*parts: str) -> float:
    """A number in (0, 1) from the SHA-256 of PARTS."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2**64


def score(cache: str, weight: float, lfn: str) -> float:
    return -weight / math.log(_unit(cache, lfn))


def ranked(lfn: str, caches: Sequence[tuple[str, float]]) -> list[str]:
    """The names of CACHES ((name, weight) pairs) for the file LFN, its home first and then its fail-over order."""
    if not caches:
        raise ValueError("no caches to place files on")
    return [name for name, _ in sorted(caches, key=lambda c: (-score(c[0], c[1], lfn), c[0]))]


def home(lfn: str, caches: Sequence[tuple[str, float]]) -> str:
    return ranked(lfn, caches)[0]


def modulo_home(lfn: str, caches: Sequence[str]) -> str:
    """Plain hashing: sha256(LFN) modulo the number of caches."""
    return caches[int.from_bytes(hashlib.sha256(lfn.encode()).digest(), "big") % len(caches)]
