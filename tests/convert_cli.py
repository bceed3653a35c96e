"""Run `vltools convert ...` in-process (fast) for the converter tests; exit codes are tested by subprocess."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from vltools.cli import cli

DATA = Path(__file__).parent / "data" / "convert"


def convert(*args: object) -> Result:
    """Invoke `vltools convert ARGS`; any error fails the test with its message."""
    result = CliRunner().invoke(cli, ["convert", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result
