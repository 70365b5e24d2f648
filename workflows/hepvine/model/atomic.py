"""Crash-safe writes: every product is written under a temporary name in its own directory and renamed into place,
so a reader sees the old file or the whole new one, never a torn one, and a failure leaves no temporary behind."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import secrets
from pathlib import Path
from typing import Iterator


def _new_beside(path: Path) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` beside PATH, with the mode a plain ``open(PATH, "w")`` would give
    it (0666 less the umask: a dataset served by XRootD or a packed environment stays readable to others)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # 48 random bits taken by another writer: draw again
            continue


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside PATH to write to; renamed to PATH when the block ends, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_beside(path)
    try:
        yield tmp
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
