"""`vltools inspect FILE...`: validate vltools files and print what they hold."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import primary_output
from vltools.io.numbers import clean_numbers, dumps


@primary_output(stdout=True)
@click.command("inspect")
@click.argument("files", nargs=-1, required=True, type=InputFile("hdf5", "checkpoint", "jsonl"))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file instead of the readable form.")
def command(files: tuple[str, ...], as_json: bool) -> None:
    """Validate each FILE (features, proxy, sims, embeddings HDF5; checkpoint; captions, regions, pairs,
    rankings JSONL) and print its kind, counts, shapes and provenance. Exit 1 on the first invalid file."""
    from vltools.io.describe import describe

    for path in files:
        summary = describe(path)
        if as_json:
            click.echo(dumps(summary, default=str))
            continue
        click.echo(f"{summary.pop('path')}: {summary.pop('kind')}")
        for key, value in summary.items():
            shown = dumps(value, default=str) if isinstance(value, (dict, list)) else clean_numbers(value)
            click.echo(f"  {key}: {shown}")
