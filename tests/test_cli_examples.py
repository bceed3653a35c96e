"""The example at the end of every stage's --help, read from the help as printed: each names only options its
stage has, and all of them run, offline, as one chain on the synthetic world (vltools.cli.EXAMPLES)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from vltools.cli import EXAMPLES, STAGES, cli, main


def example_commands(name: str) -> list[list[str]]:
    """The commands of the Example block of `vltools NAME --help`: its lines, a line ending in a backslash
    continued by the next, each split into words as the shell splits it."""
    result = subprocess.run([sys.executable, "-m", "vltools", name, "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    block = []
    for line in lines[lines.index("  Example:") + 1:]:
        if not line.strip():
            break
        block.append(line.strip())
    return [shlex.split(command) for command in "\n".join(block).replace("\\\n", " ").splitlines()]


def command_of(words: list[str]) -> click.Command:
    """The click command that `vltools STAGE [SUB] ...` runs."""
    command = cli.get_command(None, words[1])
    return command.commands[words[2]] if isinstance(command, click.Group) else command


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_stage_help_shows_an_example_with_its_own_options(name):
    """The example runs the stage (after the commands that make its inputs); every --option in a command is one
    that command's stage (or subcommand) has, so that an example cannot go stale when an option is renamed."""
    commands = example_commands(name)
    assert name in [words[1] for words in commands]
    for words in commands:
        assert words[0] == "vltools" and words[1] in STAGES, words
        command = command_of(words)
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        assert {word for word in words if word.startswith("-") and word != "-"} <= known, words


@pytest.mark.slow
def test_the_examples_run_as_printed_in_one_folder_in_order(tmp_path, monkeypatch, capsys):
    """Each example once failed offline or lacked what an earlier one should have written (--weights none,
    /global for the captioner, a Karpathy file, the checkpoints). Every output an example names with -o exists
    after it ran."""
    assert sorted(EXAMPLES) == sorted(STAGES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "models"))
    for name in EXAMPLES:
        for words in example_commands(name):
            try:
                main(words[1:])
                status = 0
            except SystemExit as exc:
                status = exc.code
            assert status == 0, f"{shlex.join(words)} exited {status}: {capsys.readouterr().err[-2000:]}"
            if "-o" in words:
                assert Path(words[words.index("-o") + 1]).exists(), shlex.join(words)
