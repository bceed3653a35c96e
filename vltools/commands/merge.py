"""`vltools merge A.h5 B.h5 ... [-o ALL.h5]`: join the features files of `--shard i/n` runs."""

from __future__ import annotations

from pathlib import Path

import click

from vltools.io.atomic import binary_output
from vltools.io.features import FeaturesReader
from vltools.io.progress import log
from vltools.vision.shards import merge_features


@click.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Merged features HDF5 (default: stdout).")
def command(files: tuple[str, ...], output: str | None) -> None:
    """Concatenate features FILES in the order given (rows of each file in its own order), after checking that
    they were made with the same backbone, weights, regions mode and options, and have the same datasets,
    shapes and dtypes; an id in two files is an error. /failed lists are concatenated. Streams rows."""
    paths = [Path(f) for f in files]
    with FeaturesReader(paths[0]) as first:
        attrs = {k: v for k, v in first.attrs.items() if k != "shard"}
    attrs["merged_from"] = str([p.name for p in paths])
    failed: list[str] = []
    for path in paths:
        with FeaturesReader(path) as reader:
            failed += reader.failed
    with binary_output(output) as target:
        count = merge_features(paths, target, attrs, failed=failed)
    log.info(f"merge: wrote {count} images from {len(paths)} files to {output or 'standard output'}")
