"""The local files of a user's analysis (hepvine.model.sources): what is shipped with the jobs that run it."""

from __future__ import annotations

import importlib.machinery
import re
from pathlib import Path

import pytest

from hepvine.model import sources


def write(path, text=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_file_ships_with_what_it_imports_from_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "ana" / "mine.py",
        "import numpy as np\nimport helpers.cuts\nfrom weights import table\nfrom . import nothing\n"
        "def f():\n    import lazy\n",
    )
    write(tmp_path / "ana" / "helpers" / "__init__.py")
    write(tmp_path / "ana" / "helpers" / "cuts.py", "from calib import k\n")
    write(tmp_path / "ana" / "helpers" / "data" / "sf.json", "{}")
    write(tmp_path / "ana" / "helpers" / "__pycache__" / "cuts.cpython-313.pyc", "x")
    write(tmp_path / "ana" / "helpers" / ".hidden", "x")
    write(tmp_path / "ana" / "weights.py")
    write(tmp_path / "ana" / "lazy.py")
    write(tmp_path / "ana" / "calib.py")
    write(tmp_path / "ana" / "unrelated.py")
    write(tmp_path / "ana" / "helpers" / "cuts.py~", "x")  # an editor's backup
    write(tmp_path / "ana" / "notimported" / "x.py")
    write(tmp_path / "ana" / "json" / "x.py")  # a directory named as the standard library's json: not the import
    write(tmp_path / "shared.py")  # in the working directory, where the job's `python -m` imports from too
    write(tmp_path / "ana" / "nspkg" / "mod.py")  # a namespace package (no __init__.py): nothing installed is nspkg
    write(tmp_path / "ana" / "more.py", "import json\nimport shared\nfrom nspkg import mod\n")
    write(tmp_path / "ana" / "mine2.py", "import more\n")

    assert sources.local_sources("ana/mine.py:Proc") == [
        "ana/mine.py",
        "ana/helpers/__init__.py",
        "ana/helpers/cuts.py",
        "ana/helpers/data/sf.json",
        "ana/lazy.py",
        "ana/weights.py",
        "ana/calib.py",
    ]
    assert sources.local_sources("ana/mine2.py:f") == ["ana/mine2.py", "ana/more.py", "ana/nspkg/mod.py", "shared.py"]
    # a compiled extension module beside it (what `import fastmod` loads there, before a fastmod.py)
    extension = f"fastmod{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    write(tmp_path / "ana" / extension, "\x7fELF")
    write(tmp_path / "ana" / "fastmod.py")
    write(tmp_path / "ana" / "mine3.py", "import fastmod\n")
    assert sources.local_sources("ana/mine3.py:f") == ["ana/mine3.py", f"ana/{extension}"]


def test_a_module_in_the_working_directory_ships_whole_and_an_installed_one_not_at_all(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "mypkg" / "__init__.py")
    write(tmp_path / "mypkg" / "proc.py", "from mypkg import sel\nimport shared_cuts\n")
    write(tmp_path / "mypkg" / "sel.py")
    write(tmp_path / "shared_cuts.py")
    write(tmp_path / "single.py")
    assert sources.local_sources("mypkg.proc:Proc") == [
        "mypkg/__init__.py",
        "mypkg/proc.py",
        "mypkg/sel.py",
        "shared_cuts.py",
    ]
    assert sources.local_sources("single:f") == ["single.py"]
    write(tmp_path / "analyses" / "ttbar.py")  # a namespace package: no __init__.py
    write(tmp_path / "analyses" / "common" / "cuts.py")
    assert sources.local_sources("analyses.ttbar:Proc") == ["analyses/common/cuts.py", "analyses/ttbar.py"]
    assert sources.local_sources("hepvine.examples.agc:TtbarProcessor") == []
    assert sources.local_sources("coffea.processor:Nothing") == []


def test_the_analysis_version_follows_its_files_contents_and_names(tmp_path, monkeypatch):
    """``sources.version``: a digest of the analysis's local files (the file and what it imports locally), the same
    for the same files wherever the directory is, another when a file's contents or name change; None for an
    installed module (its version is the environment's)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ana.py", "import helpers\n")
    write(tmp_path / "helpers.py", "CUT = 25\n")
    first = sources.version("ana.py:Proc")
    assert re.fullmatch(r"[0-9a-f]{16}", first) and sources.version("ana.py:Other") == first
    elsewhere = tmp_path / "copy"
    write(elsewhere / "ana.py", "import helpers\n")
    write(elsewhere / "helpers.py", "CUT = 25\n")
    monkeypatch.chdir(elsewhere)
    assert sources.version("ana.py:Proc") == first
    write(elsewhere / "helpers.py", "CUT = 30\n")  # a module it imports changed
    second = sources.version("ana.py:Proc")
    assert second != first
    write(elsewhere / "ana2.py", "import helpers\n")  # the same contents under another name
    assert sources.version("ana2.py:Proc") not in (first, second)
    assert sources.version("hepvine.examples.agc:TtbarProcessor") is None


def test_a_missing_file_ships_nothing_more_and_a_broken_one_just_itself(tmp_path, monkeypatch):
    """A merge job's parse on a worker that was not sent the analysis; a syntax error is the job's to name."""
    monkeypatch.chdir(tmp_path)
    assert sources.local_sources("gone.py:Proc") == ["gone.py"]
    write(tmp_path / "broken.py", "def (:\n")
    assert sources.local_sources("broken.py:Proc") == ["broken.py"]


def test_the_analysis_file_is_parsed_once_at_the_parse_and_again_when_it_changes(tmp_path, monkeypatch):
    """local_sources (its imports) and check_names (its names) share one parse of the file as it is."""
    monkeypatch.chdir(tmp_path)
    for n in range(20):  # more local modules than parses kept: the analysis file's own is still kept
        write(tmp_path / f"helper{n}.py")
    analysis = write(
        tmp_path / "mine.py", "".join(f"import helper{n}\n" for n in range(20)) + "class Mine:\n    pass\n"
    )
    parses = []
    original = sources.ast.parse
    monkeypatch.setattr(sources.ast, "parse", lambda source, filename: parses.append(filename) or original(source))
    sources._parsed_source.cache_clear()
    helpers = sorted(f"helper{n}.py" for n in range(20))
    assert sources.local_sources("mine.py:Mine") == ["mine.py", *helpers]
    sources.check_names("mine.py:Mine", {})
    assert parses == ["mine.py", *helpers]
    analysis.write_text("import helper0\nclass Other:\n    pass\n")
    with pytest.raises(sources.SourcesError, match="defines no Mine"):  # its new contents, not the kept parse
        sources.check_names("mine.py:Mine", {})
    assert parses == ["mine.py", *helpers, "mine.py"]


def test_a_package_that_imports_itself_everywhere_is_walked_once(tmp_path, monkeypatch):
    """Absolute self-imports (`from mypkg import x` in each of its modules) do not walk the package again each."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "mypkg" / "__init__.py")
    for i in range(150):
        write(tmp_path / "mypkg" / f"m{i}.py", "import mypkg\nfrom mypkg import m0\n")
    walks = []
    original = sources._package_files
    monkeypatch.setattr(sources, "_package_files", lambda d: walks.append(d) or original(d))
    assert len(sources.local_sources("mypkg.m1:Proc")) == 151
    assert walks == [Path("mypkg")]


def test_too_much_to_ship_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "big" / "__init__.py")
    for i in range(5):
        write(tmp_path / "big" / f"m{i}.py")
    monkeypatch.setattr(sources, "MAX_FILES", 4)
    with pytest.raises(sources.SourcesError, match=r"big.*6 files.*install the package"):
        sources.local_sources("big.m0:Proc")


def test_files_outside_the_directory_snakemake_runs_in_are_named_with_how_to_send_them(tmp_path, monkeypatch):
    """Without a shared filesystem a job is sent only files under the directory Snakemake runs in: an analysis outside
    it is refused before any job, with the link that sends it; the same analysis through that link is sent."""
    work, elsewhere = tmp_path / "work", tmp_path / "home" / "ana"
    write(elsewhere / "mine.py", "import helpers\n")
    write(elsewhere / "helpers.py")
    work.mkdir()
    monkeypatch.chdir(work)
    spec = f"{elsewhere}/mine.py:Mine"
    files = sources.local_sources(spec)
    assert files == [f"{elsewhere}/mine.py", f"{elsewhere}/helpers.py"]
    with pytest.raises(sources.SourcesError) as e:
        sources.check_sendable(spec, files, work)
    assert f"{elsewhere}/mine.py, {elsewhere}/helpers.py lie(s) outside {work}" in str(e.value)
    assert f"ln -s {elsewhere} my-analysis, then analysis=my-analysis/mine.py:Mine" in str(e.value)
    (work / "my-analysis").symlink_to(elsewhere)
    linked = sources.local_sources("my-analysis/mine.py:Mine")
    assert linked == ["my-analysis/mine.py", "my-analysis/helpers.py"]
    sources.check_sendable("my-analysis/mine.py:Mine", linked, work)  # sent through the link


def test_the_workflow_refuses_an_analysis_it_cannot_send_before_any_job(tmp_path, snakemake):
    """``--shared-fs-usage none`` (the TaskVine profiles): the plan stops at its parse, naming the file and the link;
    with a shared filesystem (the local executor) the same analysis is planned; a name the file does not define
    stops it at its parse too (``check_names``)."""
    elsewhere = tmp_path / "ana"
    write(elsewhere / "mine.py", "def f(events):\n    return {}\n")
    work = tmp_path / "work"
    work.mkdir()
    nanoaod = Path(__file__).resolve().parents[3] / "shared" / "nanoaod" / "nano_dimuon.root"
    write(work / "fileset.json", f'{{"d": {{"files": {{"{nanoaod}": "Events"}}}}}}')
    config = ("dataset=fileset.json", f"analysis={elsewhere}/mine.py:f", "campaign=c")
    refused = snakemake(work, *config, extra=("-n", "--shared-fs-usage", "none"))
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and f"{elsewhere}/mine.py lie(s) outside {work}" in said
    assert "ln -s" in said and "rule analyse" not in said  # the fix named, no job planned
    planned = snakemake(work, *config, extra=("-n",))
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "analyse" in planned.stdout + planned.stderr
    misnamed = snakemake(work, *config[:1], f"analysis={elsewhere}/mine.py:g", "campaign=c", extra=("-n",))
    said = misnamed.stdout + misnamed.stderr
    assert misnamed.returncode != 0 and "mine.py defines no g (its classes and functions: f)" in said


def test_a_config_files_analysis_args_keep_their_types_and_an_absolute_analysis_path_is_refused_unshared(
    tmp_path, snakemake
):
    """A config file's analysis_args keep the types it gives them (a quoted "2018" stays text; --config's text is read
    as YAML scalars, as Snakemake hands it over as text). An analysis file under the directory Snakemake runs in,
    named by its absolute path: planned with a shared filesystem, refused at the parse without one (a job is sent it
    under its relative name, and opens the name the spec gives), saying the name to give."""
    work = tmp_path / "work"
    processor = "from coffea import processor\n\n\nclass P(processor.ProcessorABC):\n"
    processor += "    def __init__(self, year='', n=0):\n        pass\n\n    def process(self, events):\n"
    processor += "        return {}\n\n    def postprocess(self, out):\n        return out\n"
    write(work / "ana" / "mine.py", processor)
    nanoaod = Path(__file__).resolve().parents[3] / "shared" / "nanoaod" / "nano_dimuon.root"
    write(work / "fileset.json", f'{{"d": {{"files": {{"{nanoaod}": "Events"}}}}}}')
    write(work / "config.yaml", 'analysis_args: {year: "2018", n: 3}\n')
    config = ("dataset=fileset.json", f"analysis={work}/ana/mine.py:P", "campaign=c")
    from_file = snakemake(work, *config, extra=("-n", "-p", "--configfile", str(work / "config.yaml")))
    said = from_file.stdout + from_file.stderr
    assert from_file.returncode == 0, said[-2000:]
    assert f'--analysis {work}/ana/mine.py:P --analysis-args \'{{"n":3,"year":"2018"}}\'' in said, said[-3000:]
    given = snakemake(work, *config, 'analysis_args={year: "2018", n: 3}', extra=("-n", "-p"))
    # (--config: Snakemake hands it over as text, without its quotes)
    assert '--analysis-args \'{"n":3,"year":2018}\'' in given.stdout + given.stderr
    unshared = snakemake(work, *config, extra=("-n", "--shared-fs-usage", "none"))
    said = unshared.stdout + unshared.stderr
    assert unshared.returncode != 0 and "analysis=ana/mine.py:P. Jobs without a shared filesystem" in said, said
    relative = snakemake(  # the name it says is planned
        work, "dataset=fileset.json", "analysis=ana/mine.py:P", "campaign=c", extra=("-n", "--shared-fs-usage", "none")
    )
    assert relative.returncode == 0, (relative.stdout + relative.stderr)[-2000:]


ANALYSIS = """
import hist
from coffea import processor
from helpers import shared_cut as cut

try:
    from fast import Selector
except ImportError:
    Selector = None


class Mine(processor.ProcessorABC):
    def process(self, events):
        def inner(x):
            return x
        return {}


def f(events):
    return {}


g = f

try:
    from pkg import Fallback
except ImportError:
    def Fallback(events):
        return {}


@processor_from
def Decorated(events):
    return {}


match 1:
    case 1:
        class InMatch(processor.ProcessorABC):
            pass
"""


@pytest.mark.parametrize(
    "name, args, says",
    [
        ("Mine", {"pt_min": 1}, None),
        ("f", {}, None),
        ("g", {}, None),  # an alias
        ("cut", {}, None),  # imported
        ("Selector", {}, None),  # bound in a try block
        ("Fallback", {"pt_min": 1}, None),  # a class when pkg imports, a function only when it does not
        ("Decorated", {"pt_min": 1}, None),  # a decorator may make it a processor class
        ("InMatch", {}, None),
        (
            "Min",
            {},
            "defines no Min (its classes and functions: Decorated, Fallback, InMatch, Mine, f); name the processor",
        ),
        ("inner", {}, "defines no inner"),  # a function's own, not the module's
        ("f", {"pt_min": 1}, "f is a function, which takes no analysis_args (only a processor class is instantiated"),
    ],
)
def test_a_name_the_analysis_file_does_not_define_is_said_before_any_job(tmp_path, monkeypatch, name, args, says):
    """Read from the file (never run): a name it does not bind at its top level, or analysis_args for a function,
    is refused at the parse with what it does define; what the source cannot tell is left to the job."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "mine.py", ANALYSIS)
    if says is None:
        sources.check_names(f"mine.py:{name}", args)
    else:
        said = re.escape(f"analysis=mine.py:{name}: ") + ".*" + re.escape(says)
        with pytest.raises(sources.SourcesError, match=said):
            sources.check_names(f"mine.py:{name}", args)
    dynamic = ("from helpers import *\n", "globals()['Dyn'] = 1\n", "exec('Dyn = 1')\n", "for Dyn in (1,):\n    pass\n")
    for source in dynamic:
        write(tmp_path / "dyn.py", source)
        sources.check_names("dyn.py:Dyn", {})  # the job says, if it is not there
    sources.check_names("hepvine.examples.agc:Nothing", {})  # a module: the job says
    sources.check_names("broken.py:F", {})  # no such file: said elsewhere
