"""Queries typed by a user (`vltools search`, `vltools.search(..., model=)`): texts, or image files for an rmac
model, encoded by the checkpoint that encoded a saved index or an image embeddings file and searched there at
once, without a queries file, `encode` and `match` in between.

The checkpoint must be the one the searched embeddings record (by its digest), as `match --index-file` requires
of its queries' file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.data.blocks import CaptionBlocks
from vltools.errors import VLToolsError, argument
from vltools.infer.embed import embed_all, require_separable
from vltools.infer.index import load_index
from vltools.infer.loader import LoadedModel, OpenClipModel
from vltools.infer.match import Matches, Search
from vltools.infer.openclip import text_embeddings
from vltools.infer.rmac import QueryOptions, encode_rmac
from vltools.infer.topk import search
from vltools.io.embeddings import open_embeddings
from vltools.io.hdf5 import attributes, hdf5_kind
from vltools.io.ids import id_problem
from vltools.text.vocab import Coverage

PathLike = str | os.PathLike
SHOWN_CHARS = 40     # of a query quoted in an error


@dataclass
class Gallery:
    """What the queries search: the ids and side of a saved index's or an embeddings file's rows, the checkpoint
    that encoded them (its digest and recorded path), and the search (queries [Q, D], k) -> (scores, rows)."""

    path: Path
    ids: list[str]
    side: str
    checkpoint_digest: str | None
    checkpoint: object
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@contextmanager
def open_gallery(path: PathLike, options: Search) -> Iterator[Gallery]:
    """A saved index (`vltools index`, searched with `options.nprobe`) or an embeddings file (`vltools encode`,
    searched exactly on `options.device`) as a Gallery, open while the block runs."""
    kind = hdf5_kind(path)
    if kind == "index":
        saved = load_index(path)
        yield Gallery(saved.path, saved.ids, saved.side, saved.file.checkpoint_digest,
                      saved.file.attrs.get("checkpoint"), lambda queries, k: saved.search(queries, k, options.nprobe))
        return
    if kind != "embeddings":
        raise VLToolsError(f"{path}: is {'not HDF5' if kind is None else f'a {kind} file'}; search a saved index "
                           "(vltools index) or an image embeddings file (vltools encode)")
    found = open_embeddings(path)
    try:
        yield Gallery(found.path, found.ids, found.side, found.checkpoint_digest,
                      attributes(found.handle).get("checkpoint"),
                      lambda queries, k: search(queries, found.emb, k, device=options.device))
    finally:
        found.close()


def checked_queries(queries: Sequence[str]) -> list[str]:
    """The queries without surrounding blanks; an empty one, one that no id can hold (a control character: the
    query is its rankings' id) or none at all is one line naming it."""
    if not queries:
        raise VLToolsError(f"no query given; give {argument('queries', 'TEXT')} (texts; image files for an rmac "
                           "model)")
    kept = [query.strip() for query in queries]
    for number, query in enumerate(kept, 1):
        problem = "is empty" if not query else id_problem(query)
        if problem is not None:
            shown = query if len(query) <= SHOWN_CHARS else query[:SHOWN_CHARS] + "..."
            raise VLToolsError(f"query {number} of {len(kept)}{f' ({shown!r})' if query else ''} {problem}; give "
                               "one line of text a query")
    return kept


def check_built_by(gallery: Gallery, loaded: LoadedModel) -> None:
    """Refuse a gallery whose embeddings another checkpoint than `loaded` encoded, or that records none (nothing
    then shows that the queries and the rows are comparable)."""
    if gallery.checkpoint_digest == loaded.digest:
        return
    if gallery.checkpoint_digest is None:
        raise VLToolsError(f"{gallery.path}: records no checkpoint digest, so whether {loaded.path} encoded its "
                           "embeddings cannot be checked; encode them again with vltools encode (and index them)")
    raise VLToolsError(f"{argument('model', str(loaded.path))}: another checkpoint ({loaded.digest}) than the one "
                       f"that encoded the embeddings of {gallery.path} ({gallery.checkpoint_digest}, "
                       f"{gallery.checkpoint or 'see vltools inspect'}); search them with that checkpoint")


def encode_queries(loaded: LoadedModel, queries: Sequence[str], options: Search,
                   batch_size: int) -> tuple[list[str], np.ndarray]:
    """(ids, l2-normalised embeddings) of the queries: the texts themselves (a separable text model), or the
    images of the files and folders named (rmac; ids as `vision.images.list_inputs` gives them); an OpenCLIP model
    encodes texts with open_clip's tokenizer."""
    if loaded.name == "rmac":
        ids, emb, _ = encode_rmac(loaded, queries, QueryOptions(batch_size=batch_size), options.device)
        return ids, emb
    if isinstance(loaded, OpenClipModel):
        return list(queries), np.concatenate(list(text_embeddings(loaded.clip, queries, options.device,
                                                                  options.precision, batch_size)))
    coverage = Coverage()
    tokens = loaded.tokenize(queries, coverage)
    coverage.report(loaded.path.name)
    return list(queries), embed_all(loaded.model, CaptionBlocks(tokens, batch_size), "captions", options.device,
                                    options.precision)


def search_queries(loaded: LoadedModel, queries: Sequence[str], target: PathLike, options: Search | None = None,
                   batch_size: int = 256) -> Matches:
    """The top-k images of `target` (a saved index or an image embeddings file) for each query, encoded by
    `loaded`, the checkpoint that encoded them: texts with a separable text model (t2i), image files or folders
    with rmac (i2i; an image of the target itself comes first)."""
    options = options or Search()
    queries = checked_queries(queries)
    images = loaded.name == "rmac"
    if not images and not isinstance(loaded, OpenClipModel):
        require_separable(loaded.model, loaded.name, loaded.path)
    with open_gallery(target, options) as gallery:
        if gallery.side != "images":
            raise VLToolsError(f"{target}: holds {gallery.side or 'unknown'} embeddings; queries search images: "
                               "give the image embeddings of vltools encode, or their index")
        check_built_by(gallery, loaded)
        ids, emb = encode_queries(loaded, queries, options, batch_size)
        values, indices = gallery.search(emb, options.top_k)
        direction = "i2i" if images else "t2i"
        attrs = {"queries": str(len(ids)), "target": str(target), "model": str(loaded.path),
                 "checkpoint_digest": loaded.digest, "direction": direction}
        return Matches(ids, gallery.ids, (values, indices), None, None, None, attrs, direction)
