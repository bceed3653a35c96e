"""`vltools mine-triplets`: hard (query, relevant, irrelevant) image triplets from a proxy (Gordo & Larlus 6.1)."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SEED_RANGE, SPLIT, FiniteFloat, Integer, primary_output, threads_option
from vltools.errors import VLToolsError, shown_ids
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("mine-triplets")
@click.argument("proxy_path", metavar="PROXY.h5", type=InputFile("hdf5", formats=("proxy",)))
@click.option("--embeddings", type=InputFile("hdf5", formats=("embeddings",)),
              help="Image embeddings (vltools encode) of the split's images: keep the largest-loss triplets. "
                   "Without it, irrelevant images are drawn at random.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Triplets JSONL {query, positive, negative} (default: standard output).")
@click.option("--split", type=SPLIT, default="train", show_default=True, help="Mine among the images of this split.")
@click.option("--queries", type=Integer(min=1), default=500, show_default=True, help="N queries a round.")
@click.option("--relevant", type=Integer(min=1), default=9, show_default=True,
              help="Relevant images drawn per query (among its k proxy neighbours).")
@click.option("--pool", type=Integer(min=2), default=5000, show_default=True, help="Images in the pool.")
@click.option("--per-pair", type=Integer(min=1), default=100, show_default=True,
              help="Triplets kept per (query, relevant image).")
@click.option("--margin", type=FiniteFloat(min=0), default=0.1, show_default=True,
              help="Margin m of the loss that ranks them.")
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True)
@threads_option()
def command(proxy_path: str, embeddings: str | None, output: str | None, split: str, queries: int, relevant: int,
            pool: int, per_pair: int, margin: float, seed: int) -> None:
    """Sample a pool of images of a split (queries, relevant images from the proxy's neighbours, random others) and
    write every query's hardest triplets, as `train --model rmac` does every task.mine_every updates."""
    import numpy as np

    from vltools.data.triplets import MiningOptions, mine_round
    from vltools.io.embeddings import open_embeddings
    from vltools.io.proxy import read_proxy_file
    from vltools.io.records import write_records

    proxy = read_proxy_file(proxy_path)
    rows = proxy.split_rows(split)
    if len(rows) == 0:
        raise VLToolsError(f"{proxy_path}: no image in split {split!r} (splits: {', '.join(sorted(set(proxy.splits)))})"
                           "; give --split")
    embed = None
    if embeddings is not None:
        handle = open_embeddings(embeddings)
        try:
            row_of = {item: i for i, item in enumerate(handle.ids)}
            missing = [proxy.ids[r] for r in rows if proxy.ids[r] not in row_of]
            if missing:
                raise VLToolsError(f"{embeddings}: {len(missing)} images of the proxy's {split} split have no "
                                   f"embedding: {shown_ids(missing)}; encode the images the proxy was built over")
            vectors = np.asarray(handle.emb[()], dtype=np.float64)
        finally:
            handle.close()
        positions = np.array([row_of.get(item, -1) for item in proxy.ids])

        def embed(pool_rows: np.ndarray) -> np.ndarray:
            return vectors[positions[pool_rows]]

    options = MiningOptions(queries=queries, relevant=relevant, pool=pool, per_pair=per_pair, margin=margin)
    try:
        triplets = mine_round(proxy.neighbors, rows, options, seed, embed)
    except ValueError as exc:
        raise VLToolsError(f"{proxy_path}: {exc} in split {split!r}; rebuild the proxy with a larger split") from None
    if len(triplets) == 0:
        raise VLToolsError(f"{proxy_path}: no triplet in split {split!r}: every pooled image is relevant to its "
                           f"query ({len(rows)} images); give a larger --pool or split, or rebuild the proxy with "
                           "fewer neighbours")
    ids = proxy.ids
    count = write_records(output, ({"query": ids[q], "positive": ids[p], "negative": ids[n]} for q, p, n in triplets))
    log.info("mine-triplets: %d triplets (%s)", count, "hardest under the embeddings" if embed else "random")
