"""How long a file may take and how much disk a job needs, from each file's size: the spec's ``bytes``, or its events
times ``bytes_per_event`` when the spec does not say.

A file gets ``base_s + size / rate_floor`` seconds (``file_limit_s``); the driver runs each file in a child process
that is killed at that limit, so a hung or crawling file becomes a transient ``timeout`` record and its batch-mates go
on. A job's ``runtime`` (TaskVine's time limit for its task, the last guard) is its files' limits plus START_S. With
recompression a job stages each source once (one at a time) and keeps every copy until it ends, so it asks for disk
for its largest file plus COPY_GROWTH times all its files (copies in ZSTD are up to ~20% larger than LZMA sources);
when outputs go to a shared filesystem, the copies are not on the worker's disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

START_S = 300  # a job's own start (interpreter, imports, its shard) and end, on a busy worker
COPY_GROWTH = 1.3
BASE_DISK_MB = 500  # a recompressing job's scratch besides staged sources and copies: its shard, logs, result
MB = 1_000_000
# A file whose size nothing says (a root:// URL in a plain fileset): a large NanoAOD file. A preprocessed fileset
# (num_entries) gives better limits.
UNKNOWN_FILE_BYTES = 4_000 * MB


@dataclass(frozen=True)
class Limits:
    """The campaign's settings (config keys rate_floor_mb_s, file_time_base_s, bytes_per_event)."""

    rate_floor_mb_s: float
    file_time_base_s: float
    bytes_per_event: int

    def file_bytes(self, nevts: int | None, nbytes: int | None) -> int:
        """A file's size: NBYTES as the spec gives it (or a local file's size), else NEVTS x bytes_per_event, else
        (a plain fileset's remote file: neither is known) UNKNOWN_FILE_BYTES."""
        if nbytes:
            return nbytes
        return nevts * self.bytes_per_event if nevts is not None else UNKNOWN_FILE_BYTES

    def file_limit_s(self, nevts: int | None, nbytes: int | None) -> float:
        """How long one file may take, read, recompressed and analysed, before it is a transient timeout."""
        return self.file_time_base_s + self.file_bytes(nevts, nbytes) / (self.rate_floor_mb_s * MB)

    def job_runtime_min(self, files: Iterable[tuple[int | None, int | None]], rerun: bool = False) -> int:
        """A job's time limit in minutes (Snakemake's ``runtime``) for FILES, (nevts, bytes) pairs; with RERUN
        (config ``columns: auto``: a file whose cut falls short runs again with every field, once a job) the largest
        file's limit once more."""
        limits = [self.file_limit_s(n, b) for n, b in files]
        return math.ceil((START_S + sum(limits) + (max(limits, default=0) if rerun else 0)) / 60)

    def recompress_disk_mb(self, files: Iterable[tuple[int | None, int | None]], copies_on_worker: bool) -> int:
        """The disk (MB) a recompressing job of FILES needs on its worker: its largest staged source and, when the
        copies stay on the worker until the job ends (COPIES_ON_WORKER: no shared filesystem), all its copies."""
        sizes = [self.file_bytes(n, b) for n, b in files]
        need = max(sizes, default=0) + (COPY_GROWTH * sum(sizes) if copies_on_worker else 0)
        return BASE_DISK_MB + math.ceil(need / MB)


def duration(seconds: float) -> str:
    """SECONDS as people say a time span here (progress lines, credentials' time left): "45 s" under two minutes,
    "90 min" under two hours, "11 h 05 min" from there."""
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
