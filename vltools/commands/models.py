"""`vltools models`: the local store of named checkpoints and ensembles (`match --model NAME`)."""

from __future__ import annotations

import click

from vltools.commands.options import primary_output
from vltools.errors import argument
from vltools.io.model_store import add_model, read_index, remove_model, store_dir
from vltools.io.progress import log
from vltools.io.released import RELEASED


@click.group("models")
def command() -> None:
    """List, add and remove named models in the local store (folder: $VLTOOLS_MODELS, default
    ~/.local/share/vltools/models). `vltools match --model NAME` accepts a stored name wherever it takes a
    checkpoint; a name with several checkpoints is an ensemble (mean of their similarities, e.g. sgraf = SGR + SAF).
    """


@primary_output(stdout=True)
@command.command("list")
def list_command() -> None:
    """One line per stored model on standard output: NAME, TAB, its checkpoints joined by ' + '."""
    entries = read_index()
    log.info("model store: %s (%d models)", store_dir(), len(entries))
    for name in sorted(entries):
        click.echo(f"{name}\t{' + '.join(entries[name]['members'])}")


@primary_output(stdout=True)
@command.command("available")
def available_command() -> None:
    """The released models vltools fetches, converts and registers, on standard output: one line per model (its
    name, download size, the command that gets it (run in the vltools source tree), whether the store holds it,
    the option that takes it, what it is), then each command's sources and what else it needs."""
    entries = read_index()
    rows = [("NAME", "DOWNLOAD", "COMMAND (in the vltools source tree)", "STORED", "OPTION", "WHAT")]
    rows += [(m.name, m.download.size(), m.download.command, "yes" if m.name in entries else "no",
              argument(m.option), m.what) for m in RELEASED.values()]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))
    for download in dict.fromkeys(m.download for m in RELEASED.values()):
        click.echo(f"\n{download.command}\n  source: {download.source}\n  needs:  {download.needs}")


@primary_output()
@command.command("add")
@click.argument("name")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(), metavar="CKPT [CKPT...]")
@click.option("--copy", is_flag=True, help="Copy the checkpoints into the store (default: record their paths).")
@click.option("--replace", is_flag=True, help="Replace an entry of the same name.")
def add_command(name: str, checkpoints: tuple[str, ...], copy: bool, replace: bool) -> None:
    """Register NAME for one checkpoint, or for an ensemble of several (same vocabulary and region features)."""
    from vltools.infer.loader import load_models  # imported here: building the models loads torch

    load_models(checkpoints)
    entry = add_model(name, checkpoints, copy=copy, replace=replace)
    log.info("added %s: %s", name, " + ".join(entry["members"]))


@primary_output()
@command.command("remove")
@click.argument("name")
def remove_command(name: str) -> None:
    """Forget NAME (checkpoints copied into the store with --copy are deleted; others are left alone)."""
    remove_model(name)
    log.info("removed %s from %s", name, store_dir())
