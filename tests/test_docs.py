"""Every command has help text, every option too; docs/commands.md documents every command and
every option (each command's synopsis lists exactly its options, with an example run); and
README.md and docs/commands.md point only at files and sections that exist, with no machine's
absolute paths."""

import re
from pathlib import Path

import pytest
import typer.main

from autotune.cli import app

ROOT = Path(__file__).parent.parent
COMMANDS_MD = ROOT / "docs" / "commands.md"
DOCS = {"README.md": ROOT / "README.md", "docs/commands.md": COMMANDS_MD}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _walk(group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        path = prefix + (name,)
        yield " ".join(path), command
        if hasattr(command, "commands"):  # a group: its subcommands too
            yield from _walk(command, path)


COMMANDS = dict(_walk(typer.main.get_command(app)))


def headings(text: str) -> dict[str, str]:
    """Each `## ` or `### ` heading's title and the text under it, up to the next such heading."""
    found = {}
    for match in re.finditer(r"^#{2,3} ([^\n]+)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S):
        found[match.group(1).strip()] = match.group(2)
    return found


SECTIONS = headings(COMMANDS_MD.read_text())


def synopsis(name: str) -> str:
    """The first code block of the command's section, which must begin with `mmtune NAME`."""
    section = SECTIONS.get(f"mmtune {name}")
    assert section is not None, f"docs/commands.md has no section '## mmtune {name}'"
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block and block.group(1).startswith(f"mmtune {name}"), f"'## mmtune {name}' does not begin with its synopsis"
    return block.group(1)


def options(command) -> list[list[str]]:
    """The names of each option (a flag's on and off forms together), --help aside."""
    return [list(p.opts) + list(p.secondary_opts) for p in command.params if p.param_type_name == "option"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_has_help(name):
    command = COMMANDS[name]
    assert command.help and len(command.help) > 20
    for param in command.params:
        assert getattr(param, "help", None), f"mmtune {name} {param.name} has no help"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_is_in_the_commands_synopsis(name):
    listed = set(OPTION.findall(synopsis(name)))
    missing = [names[0] for names in options(COMMANDS[name]) if not listed & set(names)]
    assert not missing, f"docs/commands.md, mmtune {name}: no docs for {missing}"
    for argument in (p for p in COMMANDS[name].params if p.param_type_name == "argument"):
        shown = argument.name.upper()
        assert re.search(rf"\b{shown}\b", synopsis(name)), f"docs/commands.md, mmtune {name}: no argument {shown}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_synopsis_names_no_option_the_command_lacks(name):
    real = {option for names in options(COMMANDS[name]) for option in names}
    assert set(OPTION.findall(synopsis(name))) <= real, f"mmtune {name}: {set(OPTION.findall(synopsis(name))) - real}"


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items() if not hasattr(c, "commands")))
def test_every_command_has_an_example(name):
    section = SECTIONS[f"mmtune {name}"]
    example = re.search(rf"^\$ (\S+=\S+ )*mmtune {name}\b", section, re.M)
    assert example, f"docs/commands.md, mmtune {name}: no `$ mmtune {name}` example"


def test_no_section_documents_a_command_that_does_not_exist():
    documented = {title.removeprefix("mmtune ") for title in SECTIONS if title.startswith("mmtune ")}
    assert documented <= set(COMMANDS), f"docs/commands.md documents {documented - set(COMMANDS)}, which mmtune lacks"


@pytest.mark.parametrize("name", sorted(n for n in COMMANDS if " " not in n))
def test_the_readme_names_every_command(name):
    assert f"mmtune {name}" in DOCS["README.md"].read_text()


def _prose(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_point_at_files_that_exist(doc):
    path = DOCS[doc]
    text = _prose(path.read_text())
    named = [t.rstrip(".,:;") for t in re.findall(r"`([^`\s]+)`", text)]
    files = [t for t in named if re.match(r"(autotune|kernels|studies|docs|tests|\.ci)/", t)
             and not re.search(r"[<>*…]|OUT", t)]  # placeholders
    missing = [f for f in files if not (ROOT / f).exists()]
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(#[^)\s]*)?\)", text):
        if target.startswith(("http:", "https:")):
            continue
        linked = (path.parent / target).resolve() if target else path
        if not linked.exists():
            missing.append(target)
        elif anchor and anchor[1:] not in {_slug(t) for t in headings(linked.read_text())}:
            missing.append(f"{target}{anchor}")
    assert not missing, f"{doc} names what does not exist: {missing}"


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_name_sections_that_exist(doc):
    """`see "X"` names a heading of the same file; `docs/commands.md, "X"` one of that file."""
    text = DOCS[doc].read_text()
    wanted = [(doc, title) for title in re.findall(r'[Ss]ee "([^"]+)"', text)]
    wanted += [("docs/commands.md", title) for title in re.findall(r'docs/commands\.md,\s+"([^"]+)"', text)]
    missing = [(where, title) for where, title in wanted if title not in headings(DOCS[where].read_text())]
    assert not missing, f"{doc} refers to sections that do not exist: {missing}"


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_hold_no_machines_absolute_paths(doc):
    found = re.findall(r"(?<![\w.~])/(?:root|work|home|tmp|Users|opt|mnt|var)/\S*", DOCS[doc].read_text())
    assert not found, f"{doc} names paths of one machine: {found}"
