"""Every command's --help shows the default of every option that has one."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from forewarn.cli.main import cli


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


ALL = commands(cli)
UNSET = getattr(click.core, "UNSET", None)  # click 8.3's "no default given"; None before it


def has_default(option: click.Option) -> bool:
    """An option whose default a user would want told: not unset, not an off flag, not an empty repeatable."""
    default = option.default
    if default is UNSET or option.hidden or default is None or option.multiple and not default:
        return False
    if option.is_flag and not option.secondary_opts and not default:
        return False
    return not callable(default)


@pytest.mark.parametrize("path, command", ALL, ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_help_shows_every_default(path, command):
    options = [param for param in command.params if isinstance(param, click.Option) and has_default(param)]
    result = CliRunner().invoke(cli, [*path, "--help"], env={"FOREWARN_SERVER": None})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for option in options:
        shown = str(option.default).lower() if isinstance(option.default, bool) else str(option.default)
        # A bool flag pair shows the flag its default stands for (vm-ports), other options their value.
        expected = (
            f"[default: {(option.opts[0] if option.default else option.secondary_opts[0]).lstrip('-')}]"
            if option.is_flag and option.secondary_opts
            else f"default: {shown}"
        )
        assert expected in text, f"forewarn {' '.join(path)} --help: {option.opts[0]} does not show {expected}"


def test_the_walk_reaches_the_commands_users_run():
    names = {" ".join(path) for path, _ in ALL}
    assert {"serve", "replay", "record", "scenario run", "clock advance", "schedule"} <= names
