"""`vltools merge A.h5 B.h5 ... [-o ALL.h5]` and `vltools merge FOLDER [-o ONE]`: join features files of the same kind
(shards, dataset splits), or the parts of one run (vltools.io.shards) into the file one process writes."""

from __future__ import annotations

from pathlib import Path

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import output_option, primary_output
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("merge")
@click.argument("files", nargs=-1, required=True, type=InputFile("hdf5", "jsonl"))
@output_option("-o", "--output", type=click.Path(dir_okay=False), binary="HDF5",
               help="Merged features HDF5, or the one file of a folder's parts (default: standard output, never a "
                    "terminal).")
def command(files: tuple[str, ...], output: str | None) -> None:
    """Concatenate features FILES in the order given (rows of each file in its own order): shards of one
    extraction, or the splits of one dataset (`convert precomp` of train and dev).

    The files must hold the same features: backbone, weights, regions mode and options, datasets, shapes and
    dtypes; where they came from (source, split, command, time, digests) may differ and is kept per part in the
    `parts` attribute. An id in two files is an error. /failed lists are concatenated. Streams rows.

    One FOLDER of parts (written by `--shard I/N -o FOLDER/`, or under torchrun with -o FOLDER or match's --sims
    FOLDER) becomes the file one process would have written: features, embeddings, sims or JSON lines (captions),
    the same bytes but the creation time.
    Every stage reads such a folder as one input, so merging is only for when one file is wanted.
    """
    from vltools.io.merge import merge_inputs
    from vltools.io.output import written

    paths = [Path(f) for f in files]
    with written(output) as target:
        count, what = merge_inputs(paths, target)
    log.info(f"merge: wrote {count} {what} from {len(paths)} inputs to {output or 'standard output'}")
