"""Fixtures of the chaos tests: generated base files (once per session), a private XRootD origin and XCaches per
test, and campaigns over copies of the base files, removed afterwards."""

from __future__ import annotations

import shutil
import uuid

import pytest
from chaos_stack import Campaign, Xrootd, base_files, site_config, spec_in_origin


@pytest.fixture(scope="session")
def bases(tmp_path_factory):
    return base_files(tmp_path_factory.mktemp("bases"))


@pytest.fixture
def xrootd(tmp_path, services):
    """The private origin and caches, started (a test may stop and restart them); stopped at the end."""
    stack = Xrootd(tmp_path / "xrootd")
    stack.start()
    yield stack
    stack.stop()


@pytest.fixture
def campaigns(xrootd, bases):
    """make(name, counts, *options, site=text, spec=spec): a Campaign over COUNTS[process] files copied into the
    private origin (or over SPEC, another campaign's files), with the site config TEXT (default: one 1-core worker
    per rack on the private caches)."""
    tag = f"chaos-{uuid.uuid4().hex[:8]}"
    made = []

    def make(
        name: str, counts: dict[str, int], *options: str, site: str | None = None, spec: dict | None = None
    ) -> Campaign:
        made.append(
            Campaign(tag, name, spec or spec_in_origin(xrootd, bases, counts), site or site_config(xrootd), options)
        )
        return made[-1]

    yield make
    for campaign in made:
        campaign.cleanup()
    if made:
        shutil.rmtree(made[0].inputs, ignore_errors=True)
