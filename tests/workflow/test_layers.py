"""Imports point one way: the layers of the workflow package (``workflows/hepvine``) and of the executor plugin
(``plugins/snakemake-executor-plugin-taskvine/snakemake_executor_plugin_taskvine``), declared here, in the one table
each (docs/architecture.md, "Layers", mirrors them), and checked against the real imports, read with ``ast``
(nothing is imported).

A layer lists its modules in order. A module may import any module of a lower layer, and of its own layer only the
modules listed before it: an import of a higher layer is a wrong-way import, one of a module listed after it (or of
itself) in its own layer a lateral import the order forbids. Every module of a package is in exactly one layer; a
subpackage's modules are named with their dots (``examples`` is ``hepvine/examples/__init__.py``, ``examples.agc``
its ``agc.py``), and their relative imports are resolved in the subpackage. Only the modules of ``COMPUTED_IMPORTS``
may import a module by a computed name (``hepvine.work.processor`` loads the user's analysis named by the config;
``hepvine.work.cutform`` the module of a schema's events class, named by a pickled array of a cut chunk).
Also: every TaskVine call is in the plugin's adapter, so only ``taskvine.py`` imports ``ndcctools``; the plugin
imports nothing of hepvine (it is generic Snakemake), nor do its tests; and the lowest layers of the workflow, which
the Snakefile imports while it parses (in the main process and again on every job), import no ROOT I/O or numerics
library.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (layer, modules in order), lowest first. "__init__" is the package itself (``import hepvine``).
WORKFLOW_LAYERS = (
    (
        "data model",
        (
            "__init__",
            "model",
            "model.atomic",
            "model.records",
            "model.limits",
            "model.eras",
            "model.fileset",
            "model.dataset",
            "model.sources",
        ),
    ),
    (
        "placement and routing",
        ("routing", "routing.placement", "routing.site", "routing.replicas", "routing.index"),
    ),
    ("reading", ("reading", "reading.credentials", "reading.fetch", "reading.failures")),
    (
        "work",
        (
            "work",
            "work.schemaform",
            "work.cutform",
            "work.nanoevents",
            "work.processor",
            "work.transcode",
            "work.recompress",
        ),
    ),
    # The analyses that ship with hepvine: processors like a user's, on hepvine's lower layers only (never the
    # driver, merge or report, which run them).
    ("examples", ("examples", "examples.agc", "examples.dimuon")),
    ("jobs", ("jobs", "jobs.merge", "jobs.driver")),
    (
        "products",
        (
            "products",
            "products.output",
            "products.provenance",
            "products.cachestats",
            "products.retries",
            "products.progress",
            "products.summary",
            "products.plots",
            "products.report",
        ),
    ),
    # Not needed to run a campaign: the sandbox's services file, test data, the demo, the profiles' writer.
    (
        "development tools",
        (
            "devtools",
            "devtools.services",
            "devtools.catalogue",
            "devtools.nanoschema",
            "devtools.generate",
            "devtools.tokens",
            "devtools.proxies",
            "devtools.demo",
            "devtools.profiles",
        ),
    ),
    (
        "commands",
        (
            "commands",
            "commands.rates",
            "commands.compare",
            "commands.packenv",
            "commands.plan",
            "commands.controller",
            "commands.submit",
            "commands.status",
            "commands.datasets",
            "commands.cli",
        ),
    ),
)
PLUGIN_LAYERS = (
    ("credential files", ("credentials",)),
    ("worker side", ("warm", "library")),
    ("TaskVine adapter", ("taskvine",)),
    ("jobs as tasks", ("stragglers", "tasks", "failures")),
    ("workers", ("workergroups", "kept", "provision", "validation")),
    ("dispatch", ("dispatcher",)),
    ("executor", ("scheduler", "__init__", "__main__")),
)
# The plugin is a package below every layer of the workflow (the workflow depends on it like on any package). What
# the workflow takes from it, and its lowest layer that does: the Snakefile imports that layer while it parses, on
# every job, so only plugin modules that import no TaskVine and nothing heavy, and no layer below it.
PLUGIN_FOR_WORKFLOW = ("placement and routing", ("workergroups", "credentials"))
# Parsed with the workflow on every job: these layers stay light.
LIGHT_LAYERS = ("data model", "placement and routing")
# Imported by Snakemake's main process at the run's end (the Snakefile's onsuccess): light too.
LIGHT_MODULES = ("products.summary",)
HEAVY = ("uproot", "awkward", "numpy", "hist", "coffea", "matplotlib", "mplhep", "ROOT")
ADAPTER = "taskvine"  # the plugin's one module that imports ndcctools
# Modules that may import (or run) a module by a computed name (the import this test cannot see), and why.
COMPUTED_IMPORTS = {
    ("hepvine", "work.processor"): "the user's analysis, <module>:<Name> as config key analysis names it",
    ("hepvine", "work.cutform"): "the module of a schema's events class, as a pickled array of a cut chunk names it",
    ("snakemake_executor_plugin_taskvine", "library"): "the modules --taskvine-library-preload names",
    ("snakemake_executor_plugin_taskvine", "warm"): "a warm command's module, run as `python -m` runs it",
}


@dataclass(frozen=True)
class Package:
    name: str  # as imported, e.g. hepvine
    directory: Path
    layers: tuple[tuple[str, tuple[str, ...]], ...]


WORKFLOW = Package("hepvine", REPO / "workflows" / "hepvine", WORKFLOW_LAYERS)
PLUGIN_DISTRIBUTION = REPO / "plugins" / "snakemake-executor-plugin-taskvine"  # its pyproject.toml, README, docs, tests
PLUGIN = Package(
    "snakemake_executor_plugin_taskvine", PLUGIN_DISTRIBUTION / "snakemake_executor_plugin_taskvine", PLUGIN_LAYERS
)


def imports(source: str, package: str) -> list[tuple[str, int]]:
    """(absolute dotted name, line) of everything SOURCE, a module of PACKAGE (dotted: ``hepvine.examples`` for a
    module of that subpackage), imports, at any depth (in functions too); ``from X import a`` gives ``X.a`` (a module
    or a name in X: ``own_module`` tells). Relative imports are resolved in PACKAGE (``..`` is its parent)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            relative = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            base = ".".join(filter(None, [relative, node.module or ""]))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def hidden_imports(source: str) -> list[int]:
    """Lines of SOURCE that import a module by a computed name (``__import__``, ``importlib.import_module``,
    ``runpy.run_module``): an import this test cannot see."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            or (isinstance(node.func, ast.Attribute) and node.func.attr in ("import_module", "run_module"))
        )
    ]


def own_module(name: str, package: Package, modules: set[str]) -> str | None:
    """The module of PACKAGE that importing NAME loads (the longest of MODULES that NAME starts with: ``examples.agc``
    for ``hepvine.examples.agc.fill``; ``__init__`` for the package or a name in it), or None."""
    parts = name.split(".")
    if parts[0] != package.name:
        return None
    for end in range(len(parts), 1, -1):
        if ".".join(parts[1:end]) in modules:
            return ".".join(parts[1:end])
    return "__init__"


def plugin_import_problems(name: str, where: str, layer_index: int) -> list[str]:
    """What is wrong with the workflow's import of NAME, a part of the plugin, from WHERE in the workflow's layer
    LAYER_INDEX (0 = the lowest): PLUGIN_FOR_WORKFLOW says which modules and from which layer up."""
    lowest, allowed = PLUGIN_FOR_WORKFLOW
    lowest_index = [layer for layer, _ in WORKFLOW_LAYERS].index(lowest)
    module = name.split(".")[1] if "." in name else "__init__"
    if module not in allowed:
        return [
            f"{where} imports {name}: the workflow takes only {', '.join(allowed)} of the plugin (light modules, "
            f"imported while the Snakefile parses); add the module to PLUGIN_FOR_WORKFLOW if it imports no "
            "TaskVine and nothing heavy"
        ]
    if layer_index < lowest_index:
        return [
            f"{where} imports {name}, which PLUGIN_FOR_WORKFLOW allows from layer {lowest_index + 1} "
            f"{lowest!r} up; move the import, or lower PLUGIN_FOR_WORKFLOW's layer"
        ]
    return []


def module_name(path: Path, directory: Path) -> str:
    """The module name of PATH in the package at DIRECTORY: ``agc`` of examples/agc.py is ``examples.agc``, a
    subpackage's ``__init__.py`` is the subpackage (``examples``), the package's own stays ``__init__``."""
    parts = path.relative_to(directory).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def module_path(package: Package, module: str) -> Path:
    """Where MODULE (a name of ``module_name``) of PACKAGE is, or would be."""
    where = package.directory / module.replace(".", "/")
    return where / "__init__.py" if where.is_dir() else where.with_suffix(".py")


def containing_package(package: Package, module: str) -> str:
    """The dotted package MODULE's relative imports are resolved in: ``hepvine`` for its top-level modules,
    ``hepvine.examples`` for ``examples.agc`` and for ``examples`` itself (a subpackage's __init__)."""
    if module != "__init__" and module_path(package, module).name == "__init__.py":
        return f"{package.name}.{module}"
    return ".".join([package.name, *module.split(".")[:-1]])


def sources(package: Package) -> dict[str, str]:
    """Module name → source of every module of PACKAGE, its subpackages' (directories with an __init__.py) too."""
    return {
        module_name(path, package.directory): path.read_text()
        for path in sorted(package.directory.rglob("*.py"))
        if all((d / "__init__.py").is_file() for d in path.parents if package.directory in (d, *d.parents))
    }


def problems(package: Package, texts: dict[str, str]) -> list[str]:
    """Every import of TEXTS (module → source) that the package's layers forbid, and every module not in exactly
    one layer, each named with both modules, their layers and the line."""
    place = {}  # module → (layer index, position in layer, layer name)
    found = []
    for i, (layer, modules) in enumerate(package.layers):
        for j, module in enumerate(modules):
            if module in place:
                found.append(f"{package.name}.{module} is in two layers ({place[module][2]!r}, {layer!r})")
            place[module] = (i, j, layer)
    found += [
        f"{package.name}.{m} ({module_path(package, m)}) is in no layer: add it to the layer "
        f"table in {Path(__file__).name}"
        for m in sorted(set(texts) - set(place))
    ]
    found += [
        f"{package.name}.{m} is in the layer table but has no file in {package.directory}: remove it"
        for m in sorted(set(place) - set(texts))
    ]
    for module, text in texts.items():
        if module not in place:
            continue
        i, j, layer = place[module]
        if (package.name, module) not in COMPUTED_IMPORTS:
            found += [
                f"{package.name}.{module} (line {line}) imports a module by a computed name, which the layer "
                "check cannot see: import it by name (``from package import module``)"
                for line in hidden_imports(text)
            ]
        for name, line in imports(text, containing_package(package, module)):
            where = f"{package.name}.{module} (layer {i + 1} {layer!r}, line {line})"
            top = name.split(".")[0]
            if top == "ndcctools" and not (package is PLUGIN and module == ADAPTER):
                found.append(f"{where} imports {name}: every TaskVine call belongs in the plugin's {ADAPTER}.py")
            if package is PLUGIN and top == WORKFLOW.name:
                found.append(f"{where} imports {name}: the plugin is generic Snakemake and imports nothing of hepvine")
            if package is WORKFLOW and top == PLUGIN.name:
                found += plugin_import_problems(name, where, i)
            if package is WORKFLOW and layer in LIGHT_LAYERS and top in HEAVY:
                found.append(
                    f"{where} imports {name}: the Snakefile imports this layer while it parses, on every "
                    "job; move the code that needs it to a higher layer"
                )
            if package is WORKFLOW and module in LIGHT_MODULES and top in HEAVY:
                found.append(
                    f"{where} imports {name}: Snakemake's main process imports it at the run's end; keep it light"
                )
            target = own_module(name, package, set(texts))
            if target is None or target not in place:
                continue
            ti, tj, tlayer = place[target]
            imported = f"{package.name}.{target} (layer {ti + 1} {tlayer!r})"
            if ti > i:
                found.append(f"wrong-way import: {where} imports {imported}, a higher layer")
            elif ti == i and tj == j:
                found.append(f"{where} imports itself")
            elif ti == i and tj > j:
                found.append(
                    f"lateral import: {where} imports {imported}, listed after it in the same layer; list "
                    f"{target} before {module} if it is lower, else move the code"
                )
    return found


def test_workflow_imports_point_one_way():
    found = problems(WORKFLOW, sources(WORKFLOW))
    assert not found, "\n".join(found)


def test_plugin_imports_point_one_way_and_only_the_adapter_calls_taskvine():
    texts = sources(PLUGIN)
    assert any(name.startswith("ndcctools.") for name, _ in imports(texts[ADAPTER], PLUGIN.name)), (
        f"{ADAPTER}.py no longer imports ndcctools: update ADAPTER"
    )
    found = problems(PLUGIN, texts)
    assert not found, "\n".join(found)


def test_the_plugins_own_tests_import_nothing_of_hepvine():
    """The plugin's tests run where hepvine is not installed: they import neither hepvine nor the workflow's test
    helpers (tests/plugin/campaign_runs.py)."""
    found = [
        f"{path.relative_to(REPO)} (line {line}) imports {name}: the plugin's tests are generic Snakemake"
        for path in sorted((PLUGIN_DISTRIBUTION / "tests").glob("*.py"))
        for name, line in imports(path.read_text(), "tests")
        if name.split(".")[0] in (WORKFLOW.name, "campaign_runs")
    ]
    assert not found, "\n".join(found)


def test_the_plugin_names_nothing_of_hepvine():
    """The plugin stands alone (issue 33): no file of its distribution (code, tests, docs, metadata) says
    "hepvine", in any case: no name, module, config key, ClassAd attribute or pointer to the workflow's files."""
    kept = [
        path
        for path in sorted(PLUGIN_DISTRIBUTION.rglob("*"))
        if path.is_file() and not {"__pycache__", ".pytest_cache"} & set(path.parts) and ".egg-info" not in str(path)
    ]
    assert len(kept) > 20, "the plugin's files were not found"
    found = [
        f"{path.relative_to(REPO)}:{i}: {line.strip()}"
        for path in kept
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if "hepvine" in line.lower()
    ]
    assert not found, "\n".join(found)


def documented_layers(text: str, heading: str) -> list[tuple[str, tuple[str, ...]]]:
    """The numbered list after the line starting HEADING in docs/architecture.md's Layers section: (layer, modules),
    the modules being the back-quoted (dotted) names outside parentheses."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    after = section.split("\n" + heading, 1)[1].split("\n", 1)[1].lstrip("\n")
    items = re.findall(r"^\d+\. ([^:\n]+): (.*(?:\n {3}.*)*)", after.split("\n\n", 1)[0], re.M)
    return [(layer, tuple(re.findall(r"`(\w+(?:\.\w+)*)`", re.sub(r"\([^)]*\)", "", body)))) for layer, body in items]


def test_docs_mirror_the_layer_tables():
    text = (REPO / "docs" / "architecture.md").read_text()
    for heading, layers in (("Workflow (", WORKFLOW_LAYERS), ("Plugin (", PLUGIN_LAYERS)):
        assert documented_layers(text, heading) == list(layers), (
            f"docs/architecture.md, Layers, {heading}...: update it to {Path(__file__).name}'s table: {layers}"
        )


def test_each_kind_of_forbidden_import_is_caught():
    """Synthetic sources: the real packages' tables with one bad import each."""
    texts = {module: "" for _, modules in WORKFLOW_LAYERS for module in modules}
    bad = {
        "model.records": "from hepvine.jobs import driver\n",  # up
        "routing.placement": "import hepvine.routing.site\n",  # sideways, to a module listed after it
        "routing.site": "from hepvine.routing.site import load\n",  # itself
        "model.eras": "import uproot\n",  # heavy, in a light layer
        "work.recompress": "from ndcctools.taskvine import Manager\n",  # TaskVine outside the plugin's adapter
        "commands.cli": "import importlib\nimportlib.import_module('hepvine.' + name)\n__import__(name)\n",  # unseen
        "work.processor": "import importlib\nimportlib.import_module(where)\n",  # allowed: COMPUTED_IMPORTS
        "examples.agc": "from ..jobs.driver import run_file\nfrom . import dimuon\n",  # a subpackage's: up, sideways
        "examples.dimuon": "from hepvine.examples import agc\nfrom hepvine.work import processor\n",  # allowed
        "model.limits": "from snakemake_executor_plugin_taskvine import workergroups\n",  # the plugin, too low
        "reading.fetch": "from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher\n",  # not for it
    }
    found = problems(WORKFLOW, {**texts, **bad, "newcomer": ""})
    assert sorted(found) == sorted(
        [
            f"hepvine.newcomer ({WORKFLOW.directory / 'newcomer.py'}) is in no layer: add it to the layer table in "
            f"{Path(__file__).name}",
            "wrong-way import: hepvine.model.records (layer 1 'data model', line 1) imports hepvine.jobs.driver "
            "(layer 6 'jobs'), a higher layer",
            "wrong-way import: hepvine.examples.agc (layer 5 'examples', line 1) imports hepvine.jobs.driver (layer 6 "
            "'jobs'), a higher layer",
            "lateral import: hepvine.examples.agc (layer 5 'examples', line 2) imports hepvine.examples.dimuon (layer "
            "5 'examples'), listed after it in the same layer; list examples.dimuon before examples.agc if it is "
            "lower, else move the code",
            "lateral import: hepvine.routing.placement (layer 2 'placement and routing', line 1) imports "
            "hepvine.routing.site (layer 2 'placement and routing'), listed after it in the same layer; list "
            "routing.site before routing.placement if it is lower, else move the code",
            "hepvine.routing.site (layer 2 'placement and routing', line 1) imports itself",
            "hepvine.model.eras (layer 1 'data model', line 1) imports uproot: the Snakefile imports this layer while "
            "it parses, on every job; move the code that needs it to a higher layer",
            "hepvine.work.recompress (layer 4 'work', line 1) imports ndcctools.taskvine.Manager: every TaskVine call "
            "belongs in the plugin's taskvine.py",
            *[
                f"hepvine.commands.cli (line {n}) imports a module by a computed name, which the layer check cannot "
                "see: import it by name (``from package import module``)"
                for n in (2, 3)
            ],
            "hepvine.model.limits (layer 1 'data model', line 1) imports "
            "snakemake_executor_plugin_taskvine.workergroups, which PLUGIN_FOR_WORKFLOW allows from layer 2 'placement "
            "and routing' up; move the import, or lower PLUGIN_FOR_WORKFLOW's layer",
            "hepvine.reading.fetch (layer 3 'reading', line 1) imports "
            "snakemake_executor_plugin_taskvine.dispatcher.Dispatcher: the workflow takes only workergroups, "
            "credentials of the plugin (light modules, imported while the Snakefile parses); add the module to "
            "PLUGIN_FOR_WORKFLOW if it imports no TaskVine and nothing heavy",
        ]
    ), "\n".join(found)
    assert problems(WORKFLOW, {**texts, "model.records": "from hepvine.model import atomic\nimport hepvine\n"}) == []


def test_plugin_violations_are_caught():
    texts = {module: "" for _, modules in PLUGIN_LAYERS for module in modules}
    found = problems(
        PLUGIN,
        {
            **texts,
            "taskvine": "from ndcctools.taskvine import cvine\nfrom .tasks import x\n",
            "tasks": "import ndcctools.taskvine as vine\n",
            "provision": "from . import validation\nfrom hepvine import records\n",
        },
    )
    assert sorted(found) == sorted(
        [
            "wrong-way import: snakemake_executor_plugin_taskvine.taskvine (layer 3 'TaskVine adapter', line 2) "
            "imports snakemake_executor_plugin_taskvine.tasks (layer 4 'jobs as tasks'), a higher layer",
            "snakemake_executor_plugin_taskvine.tasks (layer 4 'jobs as tasks', line 1) imports ndcctools.taskvine: "
            "every TaskVine call belongs in the plugin's taskvine.py",
            "lateral import: snakemake_executor_plugin_taskvine.provision (layer 5 'workers', line 1) imports "
            "snakemake_executor_plugin_taskvine.validation (layer 5 'workers'), listed after it in the same layer; "
            "list validation before provision if it is lower, else move the code",
            "snakemake_executor_plugin_taskvine.provision (layer 5 'workers', line 2) imports hepvine.records: "
            "the plugin is generic Snakemake and imports nothing of hepvine",
        ]
    ), "\n".join(found)
