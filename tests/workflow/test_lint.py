"""Snakemake's own linter on the workflow (``snakemake --lint``, run over a small fileset in a scratch directory):
no lint but one, which hepvine answers otherwise — "Specify a conda environment or container for each rule": every
job runs in hepvine's installed environment, or with ``--taskvine-environment`` in the packed one that travels with
it (README, "Workers with nothing installed"), so no rule names an environment of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSWERED = {"Specify a conda environment or container for each rule."}


def lints(text: str) -> list[tuple[str, str]]:
    """(what, title) of each lint in the linter's text output ("Lints for WHAT:" then "    * TITLE:" lines)."""
    found, what = [], None
    for line in text.splitlines():
        if header := re.match(r"^Lints for (.+):$", line):
            what = header.group(1)
        elif item := re.match(r"^    \* (.+):$", line):
            found.append((what, item.group(1)))
    return found


def test_snakemake_lint_finds_nothing_but_the_answered_lint(tmp_path):
    command = [sys.executable, "-m", "snakemake", "--lint", "--snakefile", str(REPO / "Snakefile"), "--directory"]
    config = [
        "--cores",
        "1",
        "--config",
        f"dataset={REPO / 'tests/data/lint-fileset.json'}",
        "analysis=hepvine.examples.dimuon:DimuonProcessor",
    ]
    run = subprocess.run([*command, str(tmp_path), *config], capture_output=True, text=True, timeout=300, cwd=REPO)
    found = lints(run.stdout + run.stderr)
    assert ("rule analyse (line", "Specify a conda environment or container for each rule.") in [
        (what[: len("rule analyse (line")], title) for what, title in found
    ], "the linter's output changed (or it did not run):\n" + (run.stdout + run.stderr)[-3000:]
    others = [f"{what}: {title}" for what, title in found if title not in ANSWERED]
    assert not others, "\n".join(others)
