"""`vltools search`: the images of a saved index or an embeddings file for query texts (or query images) typed on
the command line or piped in, encoded by the checkpoint that encoded the images."""

from __future__ import annotations

import click

from vltools.commands.inputs import STDIN, InputFile
from vltools.commands.options import (
    Integer,
    batch_size_option,
    device_option,
    precision_option,
    primary_output,
    threads_option,
)
from vltools.devices import resolve_device
from vltools.errors import VLToolsError
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("search")
@click.argument("target", metavar="INDEX.h5|IMG_EMB.h5", type=InputFile("hdf5", formats=("index", "embeddings")))
@click.option("--model", "model_path", required=True, type=InputFile("checkpoint"), metavar="CKPT",
              help="The checkpoint that encoded the images (vse or sco for text queries, rmac for query images), "
                   "as the images file records it.")
@click.option("-q", "--query", "queries", multiple=True, metavar="TEXT|IMAGE",
              help="A query: a text, or for an rmac model an image file or folder; repeatable.")
@click.option("--query-file", type=InputFile("lines", stdin=True), metavar="FILE|-",
              help="Queries one a line (- reads standard input), after the --query ones; blank lines are skipped.")
@click.option("-k", "--top-k", type=Integer(min=1), default=10, show_default=True,
              help="Images kept per query in the rankings.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Rankings JSONL (default: standard output).")
@click.option("--nprobe", type=Integer(min=1), default=16, show_default=True,
              help="IVF lists visited per query (a saved FAISS IVF index).")
@batch_size_option(256)
@precision_option()
@device_option()
@threads_option()
def command(target: str, model_path: str, queries: tuple[str, ...], query_file: str | None, top_k: int,
            output: str | None, nprobe: int, batch_size: int, precision: str, device: str) -> None:
    """Rank the images of INDEX.h5, a saved index (`vltools index`), or of IMG_EMB.h5, an image embeddings file
    (`vltools encode`), for each query: a text encoded by the separable model that encoded the images (t2i), or
    an image encoded by an rmac model (i2i). Writes one rankings record a query (the query itself is its id), as
    `vltools match` does; `vltools report --rankings` shows them.

    The queries come from --query (repeatable) and --query-file (one a line; `-`: standard input). The model must
    be the checkpoint the images were encoded with (the file records its digest).
    """
    if not queries and query_file is None:
        raise click.UsageError("no query given; give --query TEXT (repeatable) or --query-file FILE (- for standard "
                               "input)")
    from vltools.infer.loader import load_model
    from vltools.infer.match import Search
    from vltools.infer.query import checked_queries, search_queries
    from vltools.io.jsonl import iter_lines
    from vltools.io.records import write_records

    lines = [line for _, line in iter_lines(query_file)] if query_file is not None else []
    if query_file is not None and not lines and not queries:
        raise VLToolsError(f"{STDIN if query_file == '-' else query_file}: holds no query; give one query a line")
    given = checked_queries([*queries, *lines])     # before the model loads
    loaded = load_model(model_path, "encodable")
    found = search_queries(loaded, given, target, Search(top_k, resolve_device(device), precision, nprobe=nprobe),
                           batch_size)
    write_records(output, found.rankings())
    log.info("searched %d images of %s for %d queries with %s", len(found.column_ids), target, len(found.row_ids),
             loaded.name)
