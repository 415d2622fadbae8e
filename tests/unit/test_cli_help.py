"""Every `barge` command's --help renders (typer's rich help parses each help text as markup: a `[/x]` in one
once crashed `barge report reconcile --help` with a MarkupError, the first thing a newcomer types)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from barge.cli.main import app


def commands(group: TyperGroup, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in sorted(group.commands.items()):
        if isinstance(command, TyperGroup):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


ALL = list(commands(typer.main.get_group(app)))  # type: ignore[arg-type]


def test_every_command_is_listed() -> None:
    assert ("report", "reconcile") in ALL
    assert ("operator",) in ALL
    assert len(ALL) >= 15  # 11 commands, 2 groups and what is under them


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "barge")
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "Traceback" not in result.output
