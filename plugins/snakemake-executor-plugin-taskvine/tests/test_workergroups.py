"""The one parser of worker groups (workergroups.parse), which the plugin applies to --taskvine-worker-groups and a
workflow may apply to any YAML that carries a worker_groups list: sizes not given come from the defaults it is
handed, every group gets the common features, and a list with any problem gives no groups. Pure logic; the real runs
are in test_worker_groups and test_security."""

from __future__ import annotations

from snakemake_executor_plugin_taskvine.workergroups import WorkerGroup, parse


def test_sizes_come_from_the_list_else_the_defaults_else_the_groups_own():
    items = [{"name": "a", "features": ["rack-a"], "cores": 8}, {"name": "b", "max_workers": 3}]
    groups, found = parse(items, "groups.yaml", defaults={"cores": 2, "memory_mb": 1000}, common_features=("x",))
    assert found == []
    assert groups == [
        WorkerGroup(name="a", features=("rack-a", "x"), cores=8, memory_mb=1000),
        WorkerGroup(name="b", features=("x",), cores=2, max_workers=3, memory_mb=1000),
    ]
    assert parse(items, "site.yaml")[0][1] == WorkerGroup(name="b", max_workers=3)  # no defaults: the group's own
    assert parse([], "site.yaml") == ([], [])  # no groups is the caller's to judge


def test_every_problem_is_named_and_a_list_with_one_gives_no_groups():
    items = [{"name": "a"}, {"cores": 2}, {"name": "c", "cores": True, "rack": "r"}, {"name": "a"}]
    groups, found = parse(items, "--taskvine-worker-groups g.yaml")
    assert groups == []
    assert found == [
        "--taskvine-worker-groups g.yaml: worker_groups[1] needs a name",
        "--taskvine-worker-groups g.yaml: group c: unknown key(s) rack; known: condor_requirements, cores, disk_mb, "
        "features, max_workers, memory_mb, min_workers, name",
        "--taskvine-worker-groups g.yaml: group c: cores True must be a whole number >= 1",
        "--taskvine-worker-groups g.yaml: group a appears more than once",
    ]
    assert parse({"name": "a"}, "site.yaml")[1] == [
        "site.yaml: worker_groups must be a list of groups (each with at least a name), not {'name': 'a'}"
    ]
