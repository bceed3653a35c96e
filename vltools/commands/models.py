"""`vltools models`: the local store of named checkpoints and ensembles (`match --model NAME`)."""

from __future__ import annotations

from pathlib import Path

import click

from vltools.commands.options import primary_output
from vltools.errors import VLToolsError, argument
from vltools.io.model_store import OPENCLIP, OpenClipSpec, add_model, is_openclip, read_index, remove_model, store_dir
from vltools.io.progress import log
from vltools.io.released import OPENCLIP_TAGS, RELEASED


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
    the option that takes it, what it is), then each command's sources and what else it needs; then a few OpenCLIP
    pretrained models (`--model openclip:ARCH:TAG`; any of open_clip's tags works), with their download sizes."""
    entries = read_index()
    rows = [("NAME", "DOWNLOAD", "COMMAND (in the vltools source tree)", "STORED", "OPTION", "WHAT")]
    rows += [(m.name, m.download.size(), m.download.command, "yes" if m.name in entries else "no",
              argument(m.option), m.what) for m in RELEASED.values()]
    _table(rows)
    for download in dict.fromkeys(m.download for m in RELEASED.values()):
        click.echo(f"\n{download.command}\n  source: {download.source}\n  needs:  {download.needs}")
    click.echo("\nOpenCLIP models (pip install '.[clip]'; open_clip downloads the weights on first use into its "
               "cache, the Hugging Face hub cache; offline, download the weights file from the repository and "
               "register it: vltools models add openclip:ARCH:TAG FILE)")
    _table([("NAME", "DOWNLOAD", "REPOSITORY (huggingface.co)", "STORED", "WHAT")] +
           [(m.name, m.size(), m.repository, "yes" if m.name in entries else "no", m.what) for m in OPENCLIP_TAGS])


def _table(rows: list[tuple[str, ...]]) -> None:
    """Rows on standard output, every column but the last padded to its widest cell."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))


@primary_output()
@command.command("add")
@click.argument("name")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(), metavar="CKPT [CKPT...]")
@click.option("--copy", is_flag=True, help="Copy the checkpoints into the store (default: record their paths).")
@click.option("--replace", is_flag=True, help="Replace an entry of the same name.")
def add_command(name: str, checkpoints: tuple[str, ...], copy: bool, replace: bool) -> None:
    """Register NAME for one checkpoint, or for an ensemble of several (same vocabulary and region features); or,
    as openclip:ARCH or openclip:ARCH:TAG, an OpenCLIP weights file (.pt, .bin, .safetensors), which that
    --model value then loads (offline too)."""
    from vltools.infer.loader import load_models, load_openclip  # imported here: building the models loads torch

    if is_openclip(name):
        if len(checkpoints) != 1:
            raise VLToolsError(f"{name}: an OpenCLIP model has one weights file, not {len(checkpoints)}")
        arch, _, tag = name[len(OPENCLIP):].partition(":")
        load_openclip(OpenClipSpec(arch, tag or None, Path(checkpoints[0]), given=name))
    else:
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
