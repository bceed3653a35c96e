"""`vltools index`: a FAISS index of `encode`'s embeddings, saved with its provenance to be searched many times."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SEED_RANGE, Integer, output_option, primary_output, threads_option
from vltools.infer.settings import DEFAULT_FACTORY, DEFAULT_TRAIN_SIZE, INDEX_METRICS
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("index")
@click.argument("embeddings", metavar="EMB.h5", type=InputFile("hdf5", formats=("embeddings",)))
@output_option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), binary="HDF5",
               help="Saved index, an HDF5 file (default: standard output, never a terminal).")
@click.option("--factory", default=DEFAULT_FACTORY, show_default=True,
              help="FAISS index factory string: Flat (exact), IVF1024,Flat, IVF4096,PQ64 (approximate, compressed; "
                   "IVF4096,PQ64np skips FAISS's polysemous code training, which takes minutes).")
@click.option("--train-size", type=Integer(min=1), default=DEFAULT_TRAIN_SIZE, show_default=True,
              help="Rows sampled (with --seed) to train an IVF or PQ index; every row when there are fewer.")
@click.option("--metric", type=click.Choice(INDEX_METRICS), default="ip", show_default=True,
              help="ip: inner product (cosine: encode's embeddings have unit length); l2: Euclidean distance "
                   "(ranked nearest first; the scores are negated squared distances).")
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True,
              help="Seed of the training sample.")
@threads_option()
def command(embeddings: str, output: str | None, factory: str, train_size: int, metric: str, seed: int) -> None:
    """Build a FAISS index over EMB.h5 (image or caption embeddings of `vltools encode`) and save it with the
    ids of its rows and its provenance: the embeddings file, its model and checkpoint digest, side, metric,
    factory, dims and count (`vltools inspect` shows them).

    `vltools match QUERIES.h5 --index-file INDEX` then searches it without rebuilding (queries encoded by the
    same checkpoint), as does `--rerank K --first-stage CKPT --index-file INDEX` and `vltools.search`. Needs
    faiss (pip install 'vltools[faiss]').
    """
    from vltools.infer.index import build_index

    built = build_index(embeddings, output, factory, metric, train_size, seed)
    log.info("indexed %d embeddings of %s (%d-d, %s, %s)", built["count"], built.get("side") or "unknown items",
             built["dims"], factory, metric)
