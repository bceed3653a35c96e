"""`vltools tfidf-proxy`: the tf-idf caption proxy of semantic similarity (Gordo & Larlus section 4)."""

from __future__ import annotations

import click

from vltools.commands.options import output_option
from vltools.io.progress import log


@click.command("tfidf-proxy")
@click.argument("captions", metavar="CAPS.jsonl", type=click.Path(dir_okay=False, allow_dash=True))
@output_option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), binary="HDF5",
               help="Proxy HDF5 (default: standard output, never a terminal).")
@click.option("--images", "images_path", type=click.Path(dir_okay=False),
              help="Images JSONL: every image it lists gets a row (those without captions the zero vector), in its "
                   "order; captions naming other images are an error. Default: the images the captions name.")
@click.option("--method", type=click.Choice(["captions", "objects"]), default="captions", show_default=True,
              help="captions: Snowball-stemmed words of every caption of an image; objects: each caption is one "
                   "object synset (a term of its own, not stemmed), e.g. from Visual Genome objects.")
@click.option("--k", type=click.IntRange(min=1), default=32, show_default=True,
              help="Nearest images kept per image, within its split (the relevant set of triplet mining).")
@click.option("--train-split", default="train", show_default=True,
              help="The vocabulary and the idf are fitted on this split only.")
def command(captions: str, output: str | None, images_path: str | None, method: str, k: int,
            train_split: str) -> None:
    """Write the proxy of CAPS.jsonl (image or region captions, each with a split): one l2-normalised tf-idf row per
    image over the words of all its captions, the vocabulary and idf of the training split, and each image's k
    nearest images of its split. `score semantic --proxy` and `mine-triplets` read it."""
    from vltools.data.semantic import build_proxy, image_texts
    from vltools.io.provenance import ids_digest
    from vltools.io.proxy import write_proxy
    from vltools.io.records import read_records

    records = read_records(captions, "captions")
    images = read_records(images_path, "images") if images_path else None
    ids, splits, texts = image_texts(records, captions, images, images_path)
    proxy = build_proxy(ids, splits, texts, train_split, k, stem=method == "captions")
    k = proxy.neighbors.shape[1]
    write_proxy(output, proxy, {"method": method, "k": k, "train_split": train_split, "captions": captions,
                                "ids_digest": ids_digest(ids)})
    log.info("tfidf-proxy: %d images, %d stems, k=%d", len(ids), len(proxy.vocab), k)
