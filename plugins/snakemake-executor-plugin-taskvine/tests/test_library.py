"""--taskvine-library: every job is a call of a TaskVine library on the workers (Snakemake imported once per worker,
each call a forked child), on real local workers, in both filesystem modes; a failing job is reported like any
other, with its rule and the last lines of its output. With --taskvine-library-preload a job's
`$TASKVINE_WARM_PYTHON MODULE ARGS` runs MODULE forked from the library's process with the preloaded modules imported,
as `python -m MODULE ARGS` would run it (arguments, working directory, environment, redirections, exit status);
without it the same command runs `python -m`. With --taskvine-local-preload a local rule's job runs it forked from
the server the executor starts on this node, and a job run as a process on a worker runs it cold."""

from __future__ import annotations

import pytest
from snakemake_runs import SMALL, slow_snakefile

pytestmark = pytest.mark.sandbox

# Each job also says which process ran it (in library mode, a child of the library process, not of a shell) and how
# long the library's warm-up took (library.warm, run once before the first call).
JOBS = slow_snakefile(
    "echo {wildcards.i} > {output}; cat /proc/$PPID/cmdline | tr '\\\\0' ' ' >> {output}; "
    "echo >> {output}; echo warm ${{TASKVINE_LIBRARY_WARM_S:-none}} >> {output}",
    n=6,
)
NO_SHARED_FS = (
    "--shared-fs-usage",
    "none",
    *SMALL,
)


@pytest.mark.parametrize("fs", [(), NO_SHARED_FS], ids=["shared-fs", "no-shared-fs"])
def test_jobs_run_as_library_calls(workflow, fs):
    wf = workflow(JOBS)
    wf.run("--taskvine-library", *fs, timeout=240, check=True)
    outputs = {p.name: p.read_text().splitlines() for p in (wf.root / "out").glob("*.txt")}
    assert sorted(outputs) == [f"{i}.txt" for i in range(6)]
    for name, lines in outputs.items():
        assert lines[0] == name.split(".")[0]
        # The shell's parent is the forked library process (TaskVine's library_code.py), not `python -m snakemake`.
        assert "library_code.py" in lines[1] and "-m snakemake" not in lines[1], lines[1]
        # The library ran its warm-up (Snakemake's parser and plugin registries, its API and DAG modules) once.
        assert lines[2].startswith("warm ") and float(lines[2].split()[1]) > 0, lines[2]


def test_failing_library_call_names_rule_and_output(workflow):
    wf = workflow(slow_snakefile("echo about to fail; exit 3", n=1))
    done = wf.run("--taskvine-library", timeout=240)
    assert done.returncode != 0
    assert "of rule slow failed" in done.stderr and "about to fail" in done.stderr, done.stderr[-3000:]


# A module that says whether it started with the preloaded module imported, and what it was given.
PROBE = """import os, sys
warm = "xml.dom.minidom" in sys.modules
print(f"warm={warm}", file=sys.stderr)
if sys.argv[2] == "fail":
    sys.exit(3)
said = {"warm": warm, "args": sys.argv[2:], "cwd": os.getcwd(), "foo": os.environ.get("FOO"), "main": __name__}
with open(sys.argv[1], "w") as f:
    f.write(repr(said))
"""
WARM = "${{TASKVINE_WARM_PYTHON:-python -m}} probe"


@pytest.mark.parametrize("preload", [True, False], ids=["preloaded", "not-preloaded"])
def test_warm_commands_run_forked_from_the_library_with_its_preloaded_modules(workflow, preload):
    wf = workflow(slow_snakefile(f"FOO=bar {WARM} {{output}} 'a b' c 2> {{output}}.err", n=4))
    (wf.root / "probe.py").write_text(PROBE)
    wf.run("--taskvine-library", *(["--taskvine-library-preload", "xml.dom.minidom"] if preload else []), check=True)
    for i in range(4):
        said = eval((wf.root / "out" / f"{i}.txt").read_text())
        assert said == {"warm": preload, "args": ["a b", "c"], "cwd": str(wf.root), "foo": "bar", "main": "__main__"}
        assert (wf.root / "out" / f"{i}.txt.err").read_text() == f"warm={preload}\n"


def test_a_failing_warm_command_fails_its_job_with_its_exit_status(workflow):
    wf = workflow(slow_snakefile(f"{WARM} {{output}} fail", n=1))
    (wf.root / "probe.py").write_text(PROBE)
    done = wf.run("--taskvine-library", "--taskvine-library-preload", "xml.dom.minidom", timeout=240)
    assert done.returncode != 0 and "exit status 3" in done.stderr and "warm=True" in done.stderr, done.stderr[-3000:]


def test_local_jobs_warm_commands_run_on_the_nodes_server_and_a_workers_processes_run_cold(workflow):
    shell = f"FOO=bar {WARM} {{output}} 'a b' c"
    wf = workflow(
        slow_snakefile(shell, n=2).replace(
            'input: expand("out/{i}.txt", i=range(2))', 'input: expand("{d}/{i}.txt", d=["out", "here"], i=range(2))'
        )
        + f"""
localrules: here

rule here:
    output: "here/{{i}}.txt"
    shell: "{shell}"
"""
    )
    (wf.root / "probe.py").write_text(PROBE)
    wf.run("--taskvine-local-preload", "xml.dom.minidom", check=True)
    for where, warm in (("here", True), ("out", False)):
        for i in range(2):
            said = eval((wf.root / where / f"{i}.txt").read_text())
            assert said == {"warm": warm, "args": ["a b", "c"], "cwd": str(wf.root), "foo": "bar", "main": "__main__"}
