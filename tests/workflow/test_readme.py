"""README.md's commands work as written: every command the README shows — each line of its code blocks (indented or
fenced) and each first cell of its tables headed ``command`` — is either run here (RUN) or listed in EXEMPT with the
reason it is not, so a README that drifts from the code fails the suite. A command in neither, or an entry of
either that the README no longer shows, fails ``test_every_readme_command_is_run_or_exempt``, naming it.

Runs happen in a fresh-clone view of the checkout: a temporary directory holding a link to each of the checkout's
tracked top-level entries and nothing else (no ``results/``, no ``.snakemake/``). Relative paths resolve as in the
checkout, a fresh clone's behaviour is what is tested (``hepvine plan`` with no local bench result), and whatever
a command writes lands in the temporary directory, never in the checkout. Where the README shows placeholders
(``<name>``, ``...``) or a full campaign, the run fills them in and dry-runs it (``snakemake -n``); the case says so.
Also here: ``hepvine --help`` and every subcommand's ``--help`` (the subcommands read from ``hepvine.commands.cli``),
and every ``hepvine ...`` the README's prose quotes names a real subcommand and real options, and every
``--taskvine-...`` option it names is one ``snakemake --help`` lists.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from test_profiles import job_counts

from hepvine.commands import cli, plan, rates

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TIMEOUT_S = 60  # each command; the whole module runs in well under a minute


# --- the README's commands ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command the README shows: its text without a trailing comment and with whitespace collapsed (the key of
    RUN and EXEMPT), the README line it is on, and the paragraph right after its block (what the README says of
    it)."""

    text: str
    line: int
    after: str = ""


def without_comment(line: str) -> str:
    """LINE up to a ``#`` that starts a shell comment (after whitespace, outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def paragraph_after(lines: list[str], end: int) -> str:
    """The lines from index END (skipping blank lines) up to the next blank line."""
    while end < len(lines) and not lines[end].strip():
        end += 1
    text = []
    while end < len(lines) and lines[end].strip():
        text.append(lines[end])
        end += 1
    return "\n".join(text)


def block_commands(block: list[tuple[int, str]], lines: list[str], end: int, prompted: bool = False) -> list[Command]:
    """The commands of one code block (pairs of line index and text): lines ending in ``\\`` joined, comment-only
    lines (a comment carried over from the line above) skipped. PROMPTED (a ``console`` block): only lines after a
    ``$ `` prompt are commands, the rest is their output."""
    found, pending, start = [], "", 0
    for index, raw in block:
        line = raw.strip()
        if prompted and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        text = without_comment(line).strip()
        if not text and not pending:
            continue
        start = start if pending else index
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        found.append(Command(" ".join((pending + text).split()), start + 1, paragraph_after(lines, end)))
        pending = ""
    return found


def table_commands(lines: list[str]) -> list[Command]:
    """The first cell (its code span) of each row of every table whose first column is headed ``command``."""
    found, in_table = [], False
    for index, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            in_table = False
        elif cells[0].lower() == "command":
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            span = re.fullmatch(r"`([^`]+)`", cells[0])
            assert span, f"README.md:{index + 1}: a command table's first cell is not one `command`: {cells[0]!r}"
            found.append(Command(" ".join(span.group(1).split()), index + 1))
    return found


SHELL_FENCES = {"", "sh", "bash", "shell", "zsh"}  # fenced blocks of commands; other languages are not commands
CONSOLE_FENCES = {"console", "shell-session"}  # commands after a `$ ` prompt, then their output


def commands(markdown: str) -> list[Command]:
    """Every command README-style MARKDOWN shows, in order: lines of shell and console fenced blocks and of indented
    code blocks, first cells of ``command`` tables."""
    lines = markdown.splitlines()
    found: list[Command] = []
    fence: tuple[str, str] | None = None  # (its marker, its language) while in a fenced block
    block: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        if fence is not None:
            if line.strip().startswith(fence[0]):
                if fence[1] in SHELL_FENCES | CONSOLE_FENCES:
                    found += block_commands(block, lines, index + 1, prompted=fence[1] in CONSOLE_FENCES)
                fence, block = None, []
            else:
                block.append((index, line))
            continue
        opening = re.match(r"^\s{0,3}(```+|~~~+)\s*([\w-]*)", line)
        if opening:
            found += block_commands(block, lines, index)
            fence, block = (opening.group(1), opening.group(2).lower()), []
            continue
        indented = line.startswith(("    ", "\t")) and line.strip()
        if indented and (block or index == 0 or not lines[index - 1].strip()):
            block.append((index, line))
        elif block and line.strip():
            found += block_commands(block, lines, index)
            block = []
    if block:
        found += block_commands(block, lines, len(lines))
    return found + table_commands(lines)


README_COMMANDS = commands(README.read_text())


# --- what is not run, and why ------------------------------------------------------------------------------------

HOST_MAKE = (
    "a host-level make target: it enters the sandbox itself (root, mount namespaces), and this test already "
    "runs inside the sandbox under `make test`"
)
SUBMITTED = (
    "submits a whole campaign to the sandbox's HTCondor pool and steers it (minutes): "
    "tests/sandbox/test_submitted_campaigns.py runs each of these on the real pool (submit from a killed session, "
    "status, condor_q's attributes, hold, release, rm, submit again)"
)
EXEMPT = {
    "make demo": "runs the whole demo campaign (generates 24 real-layout files once, ~4 min, then ~1.5 min): too slow "
    "for every `make test`; tests/workflow/test_campaign.py runs campaigns on the same services. Also: "
    f"{HOST_MAKE}",
    "make test": "it is the suite this test runs in (.ci/run runs it)",
    "make shell": f"interactive. Also: {HOST_MAKE}",
    "make run CMD='...'": f"{HOST_MAKE}; how it hands CMD to the shell is tested by tests/sandbox/test_make_run.py",
    "make services-stop": f"would stop the services the rest of `make test` uses; tests/sandbox/test_services.py tests "
    f"the stop. Also: {HOST_MAKE}",
    "make services-status": HOST_MAKE,
    "hepvine datasets 'cms:/HepvineDemo_*/Sandbox-v1/NANOAODSIM' --write results/demo-fileset.json": (
        "lists the demo's containers, which `make demo DEMO_RUCIO=1` registers in the sandbox's Rucio (a whole demo "
        "campaign); tests/sandbox/test_rucio.py runs `hepvine datasets --json --write --files` over containers of "
        "its own on the same server"
    ),
    "make clean-sandbox": f"deletes the sandbox the suite runs in. Also: {HOST_MAKE}",
    "hepvine submit --profile profiles/sandbox --config dataset=<spec> campaign=<name> "
    "site=site-configs/sandbox.yaml": SUBMITTED,
    "hepvine status <name>": SUBMITTED,
    "condor_q <cluster> -af HepvineFilesDone HepvineFilesFailed HepvineFilesTotal HepvineEventRateHz HepvineEtaS": (
        SUBMITTED
    ),
    "condor_hold <cluster>": SUBMITTED,
    "condor_release <cluster>": SUBMITTED,
    "condor_rm <cluster>": SUBMITTED,
    "hepvine generate data/ --files 5 --events 50000 --spec spec.json": "writes 20 files of 50,000 events: over 2 min "
    "(measured 2026-11-23); `hepvine generate --help` runs here and the generator writes every test dataset "
    "(hepvine.devtools.generate.generate)",
}


# --- what is run, and what must come out ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """How a README command is run here: ``fill`` replaces each placeholder the README shows (``{spec}`` and
    ``{campaign}`` stand for a small spec and a fresh campaign name), ``append`` adds arguments, ``dry_run`` makes it
    ``snakemake -n``; ``check`` asserts on (output, view directory, campaign). ``sandbox``: needs the services."""

    check: Callable[[str, Path, str], None]
    fill: dict[str, str] = field(default_factory=dict)
    append: str = ""
    dry_run: bool = False
    sandbox: bool = False
    why: str = "as written"


def dry_run_plans_the_campaign(profile: str | None = None) -> Callable[[str, Path, str], None]:
    """The dry run plans the small spec's two files as one batch (one analyse job) and a report, with PROFILE
    if given, and writes its index under the view (never the checkout)."""

    def check(output: str, view: Path, campaign: str) -> None:
        assert "This was a dry-run" in output and "Job stats:" in output, output[-3000:]
        counts = job_counts(output)
        assert counts.get("analyse") == 1 and counts.get("report") == 1, counts
        if profile:
            assert f"Using profile {profile}" in output, output[-3000:]
        assert (view / "results" / campaign / "index" / "run.json").is_file()
        assert not (REPO / "results" / campaign).exists(), "the dry run wrote into the checkout"

    return check


def gbps_quoted(text: str) -> set[int]:
    """The whole Gbps figures a README paragraph quotes ("213 Gbps", "~200 Gbps")."""
    return {int(m.group(1).replace(",", "")) for m in re.finditer(r"(\d[\d,]*)(?:\.\d+)?\s+Gbps", text)}


def plan_table(readme_paragraph: str) -> Callable[[str, Path, str], None]:
    """The planner's table has every placement policy with its rate, uses the rates shipped with hepvine (a fresh
    clone has no bench result), writes the same rates to the results/plan/<site>.json it names (in the view), and —
    caches warm — the rates (rounded) are the ones the README quotes right after the command."""

    def check(output: str, view: Path, campaign: str) -> None:
        rows = {
            m.group(1): float(m.group(2))
            for m in re.finditer(rf"^({'|'.join(plan.POLICIES)})\s+(\d+\.\d)\s+\d+\.\d\s", output, re.M)
        }
        assert set(rows) == set(plan.POLICIES) and all(r > 0 for r in rows.values()), output
        assert f"shipped with hepvine: {rates.provenance()}" in output, output
        table = re.search(r"^table and plot: (\S+\.json), ", output, re.M)
        assert table, output
        written = json.loads((view / table.group(1)).read_text())
        assert {p["policy"]: round(p["gbps"], 1) for p in written["policies"]} == rows
        if "caches warm" in output.splitlines()[0]:
            quoted = gbps_quoted(readme_paragraph)
            assert {round(r) for r in rows.values()} <= quoted, (
                f"README.md quotes {sorted(quoted)} Gbps after the plan command; it prints {rows}"
            )

    return check


SPEC_AND_CAMPAIGN = "--config dataset={spec} campaign={campaign}"
WORKFLOW_FILLED = "the README shows placeholders; filled with a small spec and dry-run (a real run is a campaign)"
GENERIC_FILLED = "generic plugin usage for any workflow: `...` filled with hepvine's config, and dry-run"


OWN_PROCESSOR = {
    "dataset=fileset.json": "dataset={spec}",
    "campaign=mine": "campaign={campaign}",
    "analysis=my_analysis.py:MyProcessor": "analysis=workflows/hepvine/examples/dimuon.py:DimuonProcessor",
}
OWN_PROCESSOR_FILLED = (
    "the README's processor file and fileset are the reader's: filled with an example processor "
    "given as a file (a job input; it takes pt_min) and a small spec, and dry-run"
)


def plan_after() -> str:
    return next((c.after for c in README_COMMANDS if c.text.startswith("hepvine plan ")), "")


RUN = {
    "snakemake --cores 2 --config dataset=<spec.json|yaml> campaign=<name>": Run(
        dry_run_plans_the_campaign(),
        fill={"<spec.json|yaml>": "{spec}", "<name>": "{campaign}"},
        dry_run=True,
        why=WORKFLOW_FILLED,
    ),
    "snakemake --profile profiles/sandbox --config dataset=... campaign=... site=site-configs/sandbox.yaml": Run(
        dry_run_plans_the_campaign("profiles/sandbox"),
        fill={"dataset=...": "dataset={spec}", "campaign=...": "campaign={campaign}"},
        dry_run=True,
        sandbox=True,
        why=WORKFLOW_FILLED,
    ),
    "snakemake --cores 2 --config dataset=fileset.json analysis=my_analysis.py:MyProcessor campaign=mine": Run(
        dry_run_plans_the_campaign(), fill=OWN_PROCESSOR, dry_run=True, why=OWN_PROCESSOR_FILLED
    ),
    "snakemake --profile profiles/sandbox --config dataset=fileset.json analysis=my_analysis.py:MyProcessor "
    'campaign=mine site=site-configs/sandbox.yaml analysis_args="{pt_min: 25.0}" chunksize=50000': Run(
        dry_run_plans_the_campaign("profiles/sandbox"),
        fill=OWN_PROCESSOR,
        dry_run=True,
        sandbox=True,
        why=OWN_PROCESSOR_FILLED,
    ),
    "hepvine plan --site site-configs/uchicago-af.yaml --dataset 219000:191TB [--codec lzma] [--cold]": Run(
        plan_table(plan_after())
    ),
    "snakemake --executor taskvine --jobs unlimited ...": Run(
        dry_run_plans_the_campaign(), fill={"...": SPEC_AND_CAMPAIGN}, dry_run=True, why=GENERIC_FILLED
    ),
    "snakemake --executor taskvine --taskvine-workers condor ...": Run(
        dry_run_plans_the_campaign(),
        fill={"...": "--jobs unlimited " + SPEC_AND_CAMPAIGN},
        dry_run=True,
        why=GENERIC_FILLED,
    ),
    "snakemake --profile profiles/sandbox ...": Run(
        dry_run_plans_the_campaign("profiles/sandbox"),
        fill={"...": SPEC_AND_CAMPAIGN},
        dry_run=True,
        sandbox=True,
        why=GENERIC_FILLED,
    ),
}


def variants(text: str) -> list[str]:
    """TEXT without its ``[optional]`` parts, then once with each of them."""
    optional = re.findall(r"\s*\[([^\]]+)\]", text)
    base = " ".join(re.sub(r"\[[^\]]+\]", "", text).split())
    return [base] + [f"{base} {part}" for part in optional]


def filled(command: str, run: Run, spec: Path, campaign: str) -> str:
    """COMMAND as it is run here: placeholders filled, arguments appended, ``-n`` for a dry run."""
    for placeholder, value in run.fill.items():
        assert placeholder in command, f"RUN[{command!r}] fills {placeholder!r}, which the command no longer has"
        command = command.replace(placeholder, value, 1)
    command = f"{command} {run.append}".strip()
    if run.dry_run:
        assert command.startswith("snakemake "), f"only snakemake commands can be dry-run: {command}"
        command = "snakemake -n " + command.removeprefix("snakemake ")
    return command.replace("{spec}", str(spec)).replace("{campaign}", campaign)


def case_id(command: Command, variant: str) -> str:
    return f"README:{command.line}:{variant}"


def cases() -> list:
    """One test case per way each README command of RUN is run (its optional parts once each)."""
    params = []
    for command in README_COMMANDS:
        run = RUN.get(command.text)
        for variant in variants(command.text) if run else []:
            marks = [pytest.mark.sandbox] if run.sandbox else []
            params.append(pytest.param(command, variant, run, marks=marks, id=case_id(command, variant)))
    return params


# --- running --------------------------------------------------------------------------------------------------


def fresh_clone_view(root: Path) -> Path:
    """ROOT/checkout: a link to each of the checkout's tracked top-level entries, nothing else."""
    tracked = subprocess.run(
        ["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), "ls-files", "-z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    view = root / "checkout"
    view.mkdir()
    for entry in sorted({path.split("/")[0] for path in tracked if path}):
        (view / entry).symlink_to(REPO / entry)
    return view


@dataclass
class Started:
    """A README command running in its own view: as typed (placeholders filled), its campaign name, its process
    (bash, leading its own process group) and the file its output goes to."""

    typed: str
    view: Path
    campaign: str
    process: subprocess.Popen
    log: Path

    def finish(self) -> str:
        """Its output once it has exited; after TIMEOUT_S its process group is killed and the test fails naming it."""
        try:
            self.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            pytest.fail(
                f"README command `{self.typed}` took over {TIMEOUT_S} s (in {self.view}); output:\n"
                f"{self.log.read_text()[-3000:]}"
            )
        return self.log.read_text()


def start(command: Command, variant: str, run: Run, root: Path) -> Started:
    """VARIANT of COMMAND, filled in as RUN says, started by bash in a fresh-clone view under ROOT, as a user types
    it."""
    view = fresh_clone_view(root)
    campaign = f"readme-{uuid.uuid4().hex[:8]}"
    spec = root / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "ttbar": {
                    "xsec": 1.0,
                    "nominal": {
                        "nevts_total": 200,
                        "files": [{"path": f"{root}/data/ttbar_{i}.root", "nevts": 100} for i in range(2)],
                    },
                }
            }
        )
    )
    typed = filled(variant, run, spec, campaign)
    log = root / "output.txt"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", typed], cwd=view, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Started(typed, view, campaign, process, log)


@pytest.fixture(scope="module")
def started(request, tmp_path_factory) -> dict[str, Started]:
    """Every README run this session collected, all started at once (each takes seconds, mostly CPU: side by side
    the module stays well within a minute); any still running at the end is killed."""
    wanted = {
        item.callspec.id
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_readme_command_runs"
    }
    runs = {}
    for param in cases():
        command, variant, run = param.values
        if param.id in wanted:
            runs[param.id] = start(command, variant, run, tmp_path_factory.mktemp("readme"))
    yield runs
    for run in runs.values():
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()


# --- the tests ----------------------------------------------------------------------------------------------------


def test_the_readme_shows_commands():
    """The parser finds the README's code blocks and command tables (an empty list would make every check here
    vacuous)."""
    kinds = {c.text.split()[0] for c in README_COMMANDS}
    assert {"make", "snakemake", "hepvine"} <= kinds, README_COMMANDS


def coverage_problems(shown: list[Command], run: dict, exempt: dict[str, str]) -> list[str]:
    """What is wrong between the README's commands SHOWN and the tables RUN and EXEMPT: a command in neither, an
    entry for a command the README no longer shows, an entry in both, an exemption without a reason."""
    texts = {c.text for c in shown}
    name = Path(__file__).name
    problems = [
        f"README.md:{c.line}: `{c.text}` is neither run by {name} (RUN) nor exempted (EXEMPT): add it to "
        "one of the two (to EXEMPT with the reason it cannot run in `make test`)"
        for c in shown
        if c.text not in run and c.text not in exempt
    ]
    problems += [
        f"{name}: `{text}` is in {table} but README.md no longer shows it: remove it there (or fix its key)"
        for table, keys in (("RUN", run), ("EXEMPT", exempt))
        for text in keys
        if text not in texts
    ]
    problems += [f"{name}: `{text}` is in both RUN and EXEMPT" for text in sorted(set(run) & set(exempt))]
    problems += [f"{name}: EXEMPT[`{text}`] gives no reason" for text, why in exempt.items() if not why.strip()]
    return problems


def test_every_readme_command_is_run_or_exempt():
    problems = coverage_problems(README_COMMANDS, RUN, EXEMPT)
    assert not problems, "\n".join(problems)


def test_a_new_readme_command_fails_naming_it():
    shown = README_COMMANDS + [Command("hepvine frobnicate --all", 999)]
    problems = coverage_problems(shown, RUN, EXEMPT)
    assert problems == [
        "README.md:999: `hepvine frobnicate --all` is neither run by test_readme.py (RUN) nor "
        "exempted (EXEMPT): add it to one of the two (to EXEMPT with the reason it cannot run in "
        "`make test`)"
    ]
    gone = [c for c in README_COMMANDS if c.text != "make demo"]
    assert any(
        "`make demo` is in EXEMPT but README.md no longer shows it" in p for p in coverage_problems(gone, RUN, EXEMPT)
    )


SAMPLE = """Intro.

```console
$ hepvine plan --site s.yaml \\
    --dataset 10:1TB   # a comment
its output
```

```python
print("not a command")
```

    snakemake -n --cores 1      # why
                                # its comment, carried on
    make run CMD='echo # kept'  # dropped

| command | what |
|---|---|
| `make  demo` | x |
| `make run CMD='...'` | y |

| what | time |
|---|---|
| `make bench` | not a command table |
"""


def test_the_parser_reads_fenced_and_indented_blocks_and_command_tables():
    found = commands(SAMPLE)
    assert [(c.text, c.line) for c in found] == [
        ("hepvine plan --site s.yaml --dataset 10:1TB", 4),
        ("snakemake -n --cores 1", 13),
        ("make run CMD='echo # kept'", 15),
        ("make demo", 19),
        ("make run CMD='...'", 20),
    ]
    assert found[1].after.startswith("| command | what |")


@pytest.mark.parametrize(("command", "variant", "run"), cases())
def test_readme_command_runs(command, variant, run, started):
    this = started[case_id(command, variant)]
    output = this.finish()
    assert this.process.returncode == 0, (
        f"README.md:{command.line}: `{variant}` ({run.why}; run as `{this.typed}`) "
        f"exited {this.process.returncode}:\n{output[-4000:]}"
    )
    run.check(output, this.view, this.campaign)


def help_of(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["hepvine", *args, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)


def test_hepvine_help_lists_every_subcommand():
    done = help_of()
    assert done.returncode == 0, done.stderr
    usage = (done.stdout + done.stderr).splitlines()[0]
    assert all(name in usage for name in cli.COMMANDS), (
        f"`hepvine --help` says {usage!r}; hepvine.commands.cli has {list(cli.COMMANDS)}"
    )


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """Each subcommand's ``--help`` output."""
    return {name: help_of(name) for name in cli.COMMANDS}


# Subcommands whose --help is known wrong, with the fix (the fix flips the xfail, and strict=True then fails
# until the entry is removed).
WRONG_HELP: dict[str, str] = {}  # subcommands whose --help is known to be wrong: name → the fix


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=WRONG_HELP[n])) if n in WRONG_HELP else n
        for n in cli.COMMANDS
    ],
)
def test_subcommand_help(name, helps):
    done = helps[name]
    assert done.returncode == 0, f"`hepvine {name} --help` exited {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith(f"usage: hepvine {name}"), done.stdout[:500]
    assert "-h, --help" in done.stdout, done.stdout


def quoted_hepvine_commands(markdown: str) -> list[tuple[int, str]]:
    """Every ``hepvine ...`` code span of the README's prose and every hepvine command of its code blocks."""
    spans = [
        (markdown.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"`(hepvine [a-z][^`]*)`", markdown)
    ]
    return spans + [(c.line, c.text) for c in commands(markdown) if c.text.startswith("hepvine ")]


def test_hepvine_commands_the_readme_quotes_exist(helps):
    """A subcommand or option the README quotes (``hepvine pack-env --extra recompress FILE``) that hepvine does not
    have fails here, naming the line."""
    problems = []
    for line, text in quoted_hepvine_commands(README.read_text()):
        words = text.split()
        if words[1] not in cli.COMMANDS:
            problems.append(
                f"README.md:{line}: `{text}`: hepvine has no subcommand {words[1]!r} (it has {', '.join(cli.COMMANDS)})"
            )
            continue
        options = {w.strip("[]").split("=")[0] for w in words[2:] if w.strip("[]").startswith("--")}
        problems += [
            f"README.md:{line}: `{text}`: `hepvine {words[1]} --help` has no {option}"
            for option in sorted(options)
            if not re.search(rf"(^|\s){re.escape(option)}\b", helps[words[1]].stdout, re.M)
        ]
    assert not problems, "\n".join(problems)


def test_taskvine_options_the_readme_names_exist():
    """Every ``--taskvine-...`` option the README names is one ``snakemake --help`` lists (the plugin's settings)."""
    named = set(re.findall(r"--taskvine-[a-z][a-z-]*[a-z]", README.read_text()))
    done = subprocess.run(["snakemake", "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0 and named, done.stderr[-2000:]
    missing = sorted(o for o in named if not re.search(rf"{re.escape(o)}(?![\w-])", done.stdout))
    assert not missing, f"README.md names {missing}, which `snakemake --help` does not list"
