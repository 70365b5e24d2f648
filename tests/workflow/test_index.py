"""The per-job index: batches group files of one process, variation and home cache, up to files_per_job each,
every file exactly once; a job's shard holds the same entry and route as the full spec gives; rewriting an
unchanged index keeps its files' mtimes; the merge tree takes every leaf exactly once; identities cannot collide."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from hepvine.model import dataset
from hepvine.reading import fetch
from hepvine.routing import index, site

REPO = Path(__file__).resolve().parents[2]


def spec(n_per_sample: int) -> dict:
    out = {}
    for process, variation in (("ttbar", "nominal"), ("ttbar", "scaleup"), ("wjets", "nominal")):
        files = [
            {"path": f"root://origin.example:1094//store/{process}/{variation}/f{i}.root", "nevts": 10 + i}
            for i in range(n_per_sample)
        ]
        out.setdefault(process, {"xsec": 2.0})[variation] = {"nevts_total": 1000, "files": files}
    return out


@pytest.fixture
def uchicago():
    return site.load(REPO / "site-configs" / "uchicago-af.yaml")


@pytest.mark.parametrize("files_per_job", [1, 3, 4])
def test_batches_hold_every_file_once_homed_together(uchicago, files_per_job):
    tasks = dataset.tasks(spec(50))
    route = lambda path, replicas=(): uchicago.route(path, replicas).as_dict()  # noqa: E731
    batches = index.plan(tasks, files_per_job, route)
    fids = Counter(t.fid for b in batches for t in b.files)
    assert set(fids) == {t.fid for t in tasks} and set(fids.values()) == {1}
    assert len({b.id for b in batches}) == len(batches)
    for b in batches:
        assert 1 <= len(b.files) <= files_per_job
        assert len({(t.process, t.variation, route(t.path)["cache"]) for t in b.files}) == 1
        assert b.rack == route(b.files[0].path)["rack"]
        assert b.id.startswith(f"{b.files[0].process}/{b.files[0].variation}/{route(b.files[0].path)['cache']}/")


def test_a_shard_has_the_entry_and_route_the_full_spec_gives(tmp_path, uchicago):
    full = spec(20)
    route = lambda path, replicas=(): uchicago.route(path, replicas).as_dict()  # noqa: E731
    batches = index.plan(dataset.tasks(full), 4, route)
    index.write(tmp_path, batches, {"XRD_REQUESTTIMEOUT": "30"})
    by_fid = {t.fid: t for t in dataset.tasks(full)}
    seen = 0
    for fid, path, batch in index.expected(tmp_path / "expected.json"):
        shard = index.read(index.shard_path(tmp_path, batch))
        (entry,) = [e for e in shard["files"] if e["fid"] == fid]
        assert index.task(entry) == by_fid[fid] and entry["path"] == path
        assert entry["route"] == uchicago.route(path).as_dict()
        assert shard["xrootd_client"] == {"XRD_REQUESTTIMEOUT": "30"}
        seen += 1
    assert seen == 60


def test_an_unchanged_index_is_not_rewritten(tmp_path):
    batches = index.plan(dataset.tasks(spec(9)), 4, fetch.local_route)
    assert index.write(tmp_path, batches, {}) == len(batches) + 1
    shard = index.shard_path(tmp_path, batches[0].id)
    os.utime(shard, (1, 1))
    assert index.write(tmp_path, batches, {}) == 0
    assert shard.stat().st_mtime == 1  # Snakemake would otherwise rerun every job


@pytest.mark.parametrize("leaves, fan_in", [(1, 16), (16, 16), (17, 16), (1000, 16), (5, 2), (219_000, 16)])
def test_merge_tree_takes_every_leaf_once(leaves, fan_in):
    names = [f"l{i}" for i in range(leaves)]
    nodes, root = index.merge_tree(names, fan_in, "m")
    assert 1 <= len(root) <= fan_in
    assert all(1 <= len(inputs) <= fan_in for inputs in nodes.values())
    used = Counter(x for inputs in [*nodes.values(), root] for x in inputs)
    assert set(used.values()) == {1}
    assert set(used) == set(names) | set(nodes)  # every leaf and every inner node is read exactly once
    assert max(Counter(os.path.dirname(n) for n in nodes).values(), default=0) <= 1000


# The UChicago campaign's shape: 219,000 files over the AGC's samples, in shares close to (not the same as)
# benchmarks/scale.py's.
SHARES = {
    ("ttbar", "nominal"): 0.3,
    ("ttbar", "scaledown"): 0.05,
    ("ttbar", "scaleup"): 0.05,
    ("ttbar", "ME_var"): 0.05,
    ("ttbar", "PS_var"): 0.05,
    ("single_top_s_chan", "nominal"): 0.02,
    ("single_top_t_chan", "nominal"): 0.08,
    ("single_top_tW", "nominal"): 0.05,
    ("wjets", "nominal"): 0.2,
    ("data", "nominal"): 0.15,
}


def test_219000_files_make_the_fewest_batches_and_no_crowded_directory(uchicago):
    """At the UChicago campaign's size: every file in exactly one of the fewest batches its (process, variation,
    home cache) groups allow, and no output directory of the batches or of the merge tree over 1,000 entries. The
    workflow makes one analyse job per batch (test_profiles checks that a dry run counts one per shard)."""
    big = {}
    for (process, variation), share in SHARES.items():
        files = [
            {"path": f"root://fax.mwt2.org:1094//store/{process}/{variation}/file_{j:06d}.root", "nevts": 1000}
            for j in range(round(219_000 * share))
        ]
        big.setdefault(process, {"xsec": 1.0})[variation] = {"nevts_total": 1000 * len(files), "files": files}
    assert dataset.problems(big) == []
    tasks = dataset.tasks(big)
    assert len(tasks) == 219_000
    batches = index.plan(tasks, 8, lambda path, replicas: uchicago.route(path, replicas).as_dict())
    groups = Counter((t.process, t.variation, r["cache"]) for b in batches for t, r in zip(b.files, b.routes))
    assert len(groups) == len(SHARES) * len(uchicago.caches)  # every sample spread over every cache
    assert len(batches) == sum(-(-n // 8) for n in groups.values())
    assert 219_000 / 8 <= len(batches) < 219_000 / 8 + len(groups)  # at most one partial batch a group
    fids = Counter(t.fid for b in batches for t in b.files)
    assert len(fids) == 219_000 and set(fids.values()) == {1}
    assert max(Counter(os.path.dirname(b.id) for b in batches).values()) <= 1000
    nodes, root = index.merge_tree([f"files/{b.id}.pkl" for b in batches], 16, "merge")
    assert max(Counter(os.path.dirname(n) for n in nodes).values()) <= 1000 and len(root) <= 16


def test_identities_cannot_collide():
    """a_b/c and a/b_c are two identities, two batches and two coffea datasets; a__b/c and a/b__c, whose coffea
    dataset names (<process>__<variation>) would meet, are refused, naming both."""
    collide = {
        "a_b": {"c": {"nevts_total": 1, "files": [{"path": "x.root", "nevts": 1}]}},
        "a": {"b_c": {"nevts_total": 1, "files": [{"path": "y.root", "nevts": 1}]}},
    }
    assert dataset.problems(collide) == []
    tasks = dataset.tasks(collide)
    assert sorted(t.fid for t in tasks) == ["a/b_c/0", "a_b/c/0"]
    assert sorted(t.dataset for t in tasks) == ["a__b_c", "a_b__c"]
    batches = index.plan(tasks, 4, fetch.local_route)
    assert len({b.id for b in batches}) == 2
    meet = {"a__b": {"c": collide["a_b"]["c"]}, "a": {"b__c": collide["a"]["b_c"]}}
    assert dataset.problems(meet) == [
        "a/b__c: its coffea dataset name a__b__c (<process>__<variation>) is also "
        "a__b/c's; rename one of them (e.g. without '__')"
    ]
