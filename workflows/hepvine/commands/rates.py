"""Per-core rates of the hepvine analysis as ``make bench`` measured them, shipped with the package so that
``hepvine plan`` works on a fresh clone. A local ``results/bench/analysis.json`` (written by ``make bench``) takes
precedence; these figures are what the planner falls back to, and it says so.

Per codec of the inputs: ``hz_per_core``, events analysed per second on one core, and ``bytes_per_event``, bytes
read from the file per event (the analysis's branches only), the same quantities as ``rates_hz_per_core`` →
``hepvine_<codec>`` and ``bytes`` → ``read_per_event_<codec>`` in the benchmark's JSON.
"""

from __future__ import annotations

PROVENANCE = {
    "machine": "2-core VM, Debian 12 host, sandbox trixie",
    "date": "2026-11-22",
    "command": "python benchmarks/analysis.py (make bench)",
}

ANALYSIS = {
    "lzma": {"hz_per_core": 0.160e6, "bytes_per_event": 113.6},
    "zstd": {"hz_per_core": 1.80e6, "bytes_per_event": 131.4},
}


def provenance() -> str:
    """Where the shipped figures come from, in one line."""
    return f"{PROVENANCE['command']}, {PROVENANCE['machine']}, {PROVENANCE['date']}"
