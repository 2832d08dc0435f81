"""The documentation's snakemake commands mean what it says: parsed by Snakemake's own argument parser, every
file a command names is a target (not swallowed by `--configfile` or `--config`, which take every word that
follows them) and every `--config` entry is a key=value pair. The commands live in README.md and in the pages
it links to: the results READMEs (`results/*/README.md`) and `docs/*.md`."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from snakemake.cli import get_argument_parser

from conftest import REPO

SNAKEMAKE = ".venv/bin/snakemake"
TARGET = re.compile(r"^results/\S+\.(csv|md|png|json)$")
# A bare assignment (`S="..."`, `R=results/x`); `NAME=value command` runs the command, so it is not one.
ASSIGNMENT = re.compile(r"""^[A-Z_]+=("[^"]*"|'[^']*'|\S*)\s*$""")


DOCUMENTS = [REPO / "README.md", *sorted(REPO.glob("results/*/README.md")), *sorted(REPO.glob("docs/*.md"))]


def snakemake_commands(path) -> list[list[str]]:
    """Each snakemake invocation in a Markdown file's shell blocks (fenced bash or indented), as bash expands it
    (variables, brace expansion): the block's assignments and snakemake lines run with snakemake replaced by a
    function that prints its arguments."""
    text = path.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    blocks += [
        "\n".join(line[4:] for line in block.splitlines()) for block in re.findall(r"(?:^ {4}.*\n)+", text, re.M)
    ]
    commands = []
    for block in blocks:
        lines = block.replace("\\\n", " ").splitlines()
        script = ["args() { printf '%s\\0' \"$@\"; printf '\\n'; }"]
        for line in lines:
            line = line.split(" # ")[0].replace(SNAKEMAKE, "args")
            if ASSIGNMENT.match(line) or line.startswith("$"):  # an assignment, or a command held in one
                script.append(line)
            elif "args " in line:  # the snakemake step of a line (command 1 installs first)
                script.append(line[line.index("args ") :])
        if len(script) == 1:
            continue
        out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, check=True).stdout
        commands += [line.split("\0")[:-1] for line in out.splitlines() if line]
    return commands


COMMANDS = [argv for path in DOCUMENTS for argv in snakemake_commands(path)]


def test_the_readme_has_its_snakemake_commands():
    # Command 1, the paper's, the cluster's (README.md), four offline parts and the rebuilds
    # (results/offline-cpu/README.md), the extension example (docs/extending.md) at least.
    assert len(COMMANDS) >= 12, COMMANDS
    assert snakemake_commands(REPO / "README.md"), "README.md holds command 1"


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: shlex.join(argv)[:80])
def test_readme_command_parses_as_meant(argv):
    args = get_argument_parser().parse_args(argv)
    named_files = [word for word in argv if TARGET.match(word)]
    assert set(named_files) <= set(args.targets or []), "a target was taken as an option's value"
    assert all("=" in entry for entry in args.config or []), args.config
    assert all(str(path).endswith((".yaml", ".yml")) for path in args.configfile or []), args.configfile
