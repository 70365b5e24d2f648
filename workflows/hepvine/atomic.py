"""Crash-safe writes: every product is written under a temporary name in its own directory and renamed into place,
so a reader sees the old file or the whole new one, never a torn one, and a failure leaves no temporary behind."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside PATH to write to; renamed to PATH when the block ends, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, value, indent: int | None = 2) -> None:
    write_text(path, json.dumps(value, indent=indent, sort_keys=indent is not None) + "\n")


def write_pickle(path: str | Path, value) -> None:
    with replacing(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)


def write_if_changed(path: str | Path, text: str) -> bool:
    """Write TEXT to PATH unless it already holds exactly that (its mtime, which Snakemake compares, is kept then);
    True if it was written."""
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_text(path, text)
    return True
