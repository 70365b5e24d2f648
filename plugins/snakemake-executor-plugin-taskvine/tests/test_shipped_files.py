"""What a job without a shared filesystem is sent (tasks.shipped_files): the workflow's sources, its inputs and its
outputs as sandbox names; the sources are stat'ed and named once a run (tasks.Sources, made by the executor), not
once a job (the workflow has ~500), and a source outside the workflow directory still fails each job naming its rule.
Pure logic (jobs faked); the real runs are test_snakemake_suite's TestCondorWorkersNoSharedFS and test_kept_workers."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from snakemake_interface_common.exceptions import WorkflowError

from snakemake_executor_plugin_taskvine import tasks


def job(name, inputs=(), outputs=()):
    return SimpleNamespace(name=name, input=list(inputs), output=list(outputs), log=[], is_group=lambda: False)


def test_sources_are_stated_once_a_run_and_each_job_gets_its_own_inputs(tmp_path, monkeypatch):
    workdir = tmp_path / "wf"
    (workdir / "rules").mkdir(parents=True)
    sources = [str(workdir / "Snakefile"), str(workdir / "rules" / "a.smk"), str(workdir / "gone.py")]
    for path in sources[:2]:
        open(path, "w").close()
    (workdir / "in.txt").write_text("x")
    stated = []
    isfile = os.path.isfile
    monkeypatch.setattr(tasks.os.path, "isfile", lambda p: stated.append(p) or isfile(p))
    named = tasks.Sources.of(sources, str(workdir))
    assert sorted(stated) == sorted(sources)
    runs = [
        tasks.shipped_files(
            job(f"r{k}", [str(workdir / "in.txt"), sources[0]], [str(workdir / f"out{k}")]), named, str(workdir)
        )
        for k in range(3)
    ]
    assert sorted(stated) == sorted(sources)  # none stat'ed again for the three jobs
    for k, (shipped, inputs, outputs) in enumerate(runs):
        assert shipped == [(sources[0], "Snakefile"), (sources[1], "rules/a.smk")]
        assert inputs == [(str(workdir / "in.txt"), "in.txt")]  # the Snakefile goes as a source, not as an input
        assert outputs == [(str(workdir / f"out{k}"), f"out{k}")]


def test_a_source_outside_the_workflow_directory_fails_every_job_naming_its_rule(tmp_path):
    workdir, outside = tmp_path / "wf", tmp_path / "elsewhere.py"
    workdir.mkdir()
    outside.write_text("")
    named = tasks.Sources.of([str(outside)], str(workdir))
    for name in ("first", "second"):
        with pytest.raises(WorkflowError, match=f"rule {name}: workflow source {outside} lies outside"):
            tasks.shipped_files(job(name), named, str(workdir))


def test_the_executor_names_the_sources_at_its_first_job_and_keeps_them_for_the_run(tmp_path):
    """``Executor.sources`` asks the DAG for the workflow's sources once a run, whatever the jobs that follow."""
    from snakemake_executor_plugin_taskvine import Executor

    (tmp_path / "Snakefile").write_text("")
    asked = []
    dag = SimpleNamespace(get_sources=lambda: asked.append(1) or {str(tmp_path / "Snakefile")})
    executor = SimpleNamespace(_sources=None, workflow=SimpleNamespace(dag=dag), workdir=str(tmp_path))
    first = Executor.sources(executor)
    assert [Executor.sources(executor) for _ in range(3)] == [first] * 3 and len(asked) == 1
    assert first.names == {str(tmp_path / "Snakefile"): "Snakefile"}
