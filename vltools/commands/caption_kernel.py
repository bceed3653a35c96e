"""`vltools caption-kernel`: the METEOR caption match kernel of the user-study image pairs (Gordo & Larlus Table 1)."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import output_option, primary_output
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("caption-kernel")
@click.argument("captions", metavar="CAPS.jsonl", type=InputFile("jsonl", stdin=True))
@click.option("--pairs", "pairs_path", metavar="TRIPLETS.jsonl", required=True, type=InputFile("jsonl"),
              help="User-study triplets {query, a, b, o1, o2, o3}: K is computed for every (query, a) and "
                   "(query, b).")
@output_option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
               help="Rankings JSONL, direction i2i (default: standard output).")
def command(captions: str, pairs_path: str, output: str | None) -> None:
    """Rank each triplet query's images by the match kernel of their captions (CAPS.jsonl: image or region
    captions): K(X, Y) = (sum_x max_y M(x, y) + sum_y max_x M(x, y)) / (|X| + |Y|), X the query's captions, Y the
    other image's, M(x, y) = METEOR 1.5 of x (hypothesis) against y (the one reference), each distinct sentence pair
    scored once in one Java process. `score semantic OUT --triplets TRIPLETS.jsonl` gives its user agreement."""
    from vltools.data.caption_kernel import caption_kernel, image_captions, kernel_rankings, triplet_pairs
    from vltools.eval.caption import java_path, meteor_pairs
    from vltools.io.proxy import read_triplets
    from vltools.io.records import read_records, write_records

    pairs = triplet_pairs(read_triplets(pairs_path))
    texts = image_captions(read_records(captions, "captions"))
    java_path()
    kernel = caption_kernel(texts, pairs, meteor_pairs, captions)
    count = write_records(output, kernel_rankings(pairs, kernel))
    log.info("caption-kernel: %d image pairs of %d queries", len(pairs), count)
