"""Every command has help text, every option too, and the README documents every command."""

from pathlib import Path

import pytest
import typer.main

from autotune.cli import app

README = (Path(__file__).parent.parent / "README.md").read_text()
COMMANDS = typer.main.get_command(app).commands


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_has_help(name):
    command = COMMANDS[name]
    assert command.help and len(command.help) > 20
    for param in command.params:
        assert getattr(param, "help", None), f"mmtune {name} {param.name} has no help"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_is_in_the_readme(name):
    assert f"mmtune {name}" in README
