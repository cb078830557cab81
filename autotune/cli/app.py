"""The `mmtune` command and its one error path: every command of it (and of `mmtune cache`) runs
inside `answer_in_one_line`, which turns what a user can cause (an MmtuneError, an OSError on a
path they named, a usage mistake) into one line `error: ...` on stderr and exit status 2."""

from __future__ import annotations

import errno
from contextlib import contextmanager

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from autotune.errors import MmtuneError, path_problem

from typer._click import exceptions as click_exceptions  # typer>=0.29 carries its own Click

USAGE_ERROR = 2
#: what Click (8.2 on) raises for `mmtune` alone, to print the help: no error to answer
HELP_FOR_NO_ARGS = getattr(click_exceptions, "NoArgsIsHelpError", ())


@contextmanager
def answer_in_one_line():
    """The one place where errors meet the user: one line, exit status 2."""
    try:
        yield
    except HELP_FOR_NO_ARGS:
        raise
    except click_exceptions.UsageError as error:
        _fail(error.format_message())
    except MmtuneError as error:
        _fail(str(error))
    except OSError as error:
        if error.filename is None or error.errno == errno.EPIPE:  # not a path the user named
            raise
        _fail(path_problem(error))


def _fail(message: str) -> None:
    typer.echo("error: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), err=True)
    raise typer.Exit(USAGE_ERROR)


def _untyped_help(option):
    """--help is a flag: no type beside it in the help."""
    if option is not None:
        option.metavar = ""
    return option


def _no_type(ctx) -> None:
    return None


class Command(TyperCommand):
    """A command whose help shows its parameters' metavars alone: no type beside --help, nor beside
    an argument its metavar names (where Typer would add one)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if isinstance(param, TyperArgument) and param.metavar is not None:
                param.display_type_rich = _no_type
        return params

    def get_help_option(self, ctx):
        return _untyped_help(super().get_help_option(ctx))


class Group(TyperGroup):
    """mmtune and mmtune cache: their subcommands' errors, and their own usage mistakes, in one line."""

    def make_context(self, info_name, args, parent=None):
        with answer_in_one_line():
            return super().make_context(info_name, args, parent=parent)

    def invoke(self, ctx):
        with answer_in_one_line():
            return super().invoke(ctx)

    def get_help_option(self, ctx):
        return _untyped_help(super().get_help_option(ctx))


app = typer.Typer(
    cls=Group,
    help="Tune Numba CUDA matrix-multiplication kernels per shape and keep the verified best.",
    no_args_is_help=True,
    add_completion=False,
)
cache_app = typer.Typer(cls=Group, help="Check the cache file, or set a damaged one aside and start fresh.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def command(name: str | None = None, group: typer.Typer = app):
    """Declare a command of `group` (mmtune, or mmtune cache)."""
    return group.command(name, cls=Command)
