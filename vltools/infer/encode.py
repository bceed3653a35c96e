"""What `vltools encode` and `vltools.encode` compute: the embeddings file of images or captions of a separable
model, with its provenance, from features (regions or global vectors), captions or (rmac, OpenCLIP) images. The
embeddings go
through the inference runner, which keeps them in `OUT.partial/` as they come (vltools.io.checkpoint), so that
`--resume` continues an interrupted run."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import torch

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.data.captions import DEFAULT_SPLIT, check_images, read_split
from vltools.data.sco import VectorBlocks, check_split_images, model_vectors
from vltools.errors import VLToolsError, argument
from vltools.infer.embed import embed_blocks, require_separable
from vltools.infer.loader import LoadedModel, OpenClipModel, check_features
from vltools.infer.openclip import captions_given, image_embeddings, image_inputs, text_embeddings
from vltools.infer.rmac import QueryOptions, image_batches, rmac_images, rmac_queries
from vltools.infer.runner import (
    check_output,
    checkpoint,
    computed_rows,
    finite_results,
    part_ids,
    report_skipped,
    run,
)
from vltools.infer.settings import COMMIT_SECONDS
from vltools.io.checkpoint import Rows
from vltools.io.embeddings import write_embeddings
from vltools.io.features import FeaturesReader
from vltools.io.hdf5 import hdf5_kind, refuse_nonfinite
from vltools.io.held import Embeddings
from vltools.io.progress import log
from vltools.io.provenance import ids_digest, input_digest
from vltools.io.shards import Part

PathLike = str | os.PathLike
# what takes an encode's embeddings: (ids, [B, E] blocks in their order, attributes, caption image ids[, the images
# skipped])
WriteEmbeddings = Callable[..., None]
EMBEDDINGS = Rows("float32", id_kind="id", fix="check the weights and the input, or encode in fp32 (--precision fp32)")


def encode_file(loaded: LoadedModel, source: PathLike, output: PathLike | None, device: torch.device, *,
                split: str | None = None, captions: PathLike | None = None, concepts: PathLike | None = None,
                sentences: PathLike | None = None, batch_size: int = 256, precision: str = "fp32",
                rmac: QueryOptions | None = None, resume: bool = False, checkpoint_seconds: float = COMMIT_SECONDS,
                write: WriteEmbeddings | None = None, part: Part | None = None) -> int:
    """Write `/ids` and `/emb` of SOURCE to `output` (None: standard output) and return how many: one vector per
    image of a features file (in file order, or those the `split` of `captions` names, first mention), per caption
    of a captions file's `split`, or (an rmac model) per image of an images input, as `rmac` says (its split and
    batch size are `split` and `batch_size`). An SCO model reads its concept scores from `concepts` and ("ctx +
    sen") its generated sentences from `sentences`. Finished embeddings are committed to `OUT.partial/` as they
    come, so that `resume` continues an interrupted run (see vltools.infer.runner). `write` takes the embeddings
    instead of the file (ids, blocks, attributes, caption image ids[, images skipped]). An OpenCLIP model encodes
    the images of an images input (its decoding `workers` are rmac's) or the captions of a captions file. With a
    `part` (vltools.io.shards), the part's run of the ids alone, written as a part of its set (rmac's queries are
    made over a whole split: refused)."""
    out = None if output is None else str(output)
    write = write or functools.partial(write_embeddings, output)
    check_output(out, resume)
    clip = isinstance(loaded, OpenClipModel)
    if clip and not captions_given(source):
        return _encode_images(loaded, source, out, device, write, batch_size, precision,
                              (rmac or QueryOptions()).workers, resume, checkpoint_seconds, part)
    checkpoint = str(loaded.path)
    # else captions, or rmac's images
    features_in = loaded.name != "rmac" and not clip and hdf5_kind(source) is not None
    vectors_in = features_in and getattr(loaded.model, "inputs", "regions") == "global"
    _refuse_unread(loaded, features_in, vectors_in, concepts, sentences)
    provenance = {"checkpoint": checkpoint, "checkpoint_digest": loaded.digest, "source": str(source)}
    if loaded.name == "rmac":
        if part is not None:
            raise VLToolsError(f"{checkpoint}: an rmac model encodes a split's images in one process (its queries are "
                               "made over the whole split); run it without --shard or torchrun")
        query = replace(rmac or QueryOptions(), split=split or DEFAULT_SPLIT, batch_size=batch_size)
        images = rmac_images(loaded, source, query)
        digests = {i: input_digest([checkpoint, item.path])
                   for i, item in zip(images.ids, images.store.items, strict=True)}
        def phi_batches(mine: Sequence[int]) -> Iterator[np.ndarray]:
            return finite_results(image_batches(loaded, images, mine, query, device, precision),
                                  [images.ids[k] for k in mine], "embeddings", "image id", precision)

        with computed_rows("encode", out, images.ids, phi_batches, "images", batch_size,
                           {"model": "rmac", "checkpoint": checkpoint, "image_size": images.size,
                            "precision": precision}, digests, resume, EMBEDDINGS, checkpoint_seconds) as phi:
            emb, attrs = rmac_queries(loaded, images, np.concatenate(list(phi)), query, device)
            write(images.ids, [emb], {"model": "rmac", **provenance, "ids_digest": ids_digest(images.ids), **attrs})
        log.info("encoded %d images (%s) with rmac", len(images.ids), attrs["query"])
        return len(images.ids)
    if not clip:
        require_separable(loaded.model, loaded.name, checkpoint)
        loaded.model.to(device)
    # what each embedding depends on
    rows = {"model": loaded.name, "checkpoint": checkpoint, "precision": precision,
            **({"digest": loaded.digest} if clip else {})}
    inputs = [checkpoint, str(source), *(str(path) for path in (captions, concepts, sentences) if path is not None)]
    attrs = {"model": loaded.name, **provenance, "precision": precision, **(loaded.clip.provenance() if clip else {})}

    def encode(ids: Sequence[str], blocks_of: Callable[[list[int]], Sequence], side: str,
               written: dict[str, object], caption_image_ids: Sequence[str] | None = None) -> int:
        """Encode `ids` (`blocks_of(positions)`: their blocks; for OpenCLIP, their texts), those of `part` with one,
        into `write`; return how many."""
        start, stop = part.span(len(ids), batch_size) if part is not None else (0, len(ids))
        own = list(ids[start:stop])

        def compute(mine: list[int]) -> Iterator[np.ndarray]:
            positions = [start + k for k in mine]
            computed = text_embeddings(loaded.clip, blocks_of(positions), device, precision, batch_size) if clip \
                else embed_blocks(loaded.model, blocks_of(positions), side, device, precision, show_progress=False)
            return finite_results(computed, [ids[k] for k in positions], "embeddings", f"{side[:-1]} id", precision)

        with computed_rows("encode", out, own, compute, side, batch_size, {**rows, "side": side},
                           input_digest(inputs), resume, EMBEDDINGS, checkpoint_seconds) as blocks:
            place_attrs = part.attrs(len(ids), batch_size) if part is not None else {}
            write(own, blocks, {**attrs, "side": side, **written, "ids_digest": ids_digest(own), **place_attrs},
                  None if caption_image_ids is None else caption_image_ids[start:stop])
        return len(own)

    if vectors_in:
        vectors = model_vectors(loaded.config, source, concepts, sentences, loaded.vocab)
        ids = vectors.readers[0 if vectors.readers[0] is not None else 1].ids
        if captions is not None:
            chosen = read_split(captions, split)
            for path in vectors.paths:
                if path is not None:
                    check_split_images(chosen, path, captions)
            ids = chosen.image_ids
        if vectors.sentences is not None:
            vectors.sentences.check(ids, captions or source)
        count = encode(ids, lambda mine: VectorBlocks(vectors, [ids[k] for k in mine], batch_size), "images",
                       {"concepts": str(concepts or ""), "sentences": str(sentences or "")})
        vectors.close()
        side = "images"
    elif features_in:
        ids = None
        if captions is not None:
            chosen = read_split(captions, split)
            check_images(chosen, source, captions)
            ids = chosen.image_ids
        with FeaturesReader(source) as reader:
            check_features(reader, [loaded])
            ids = reader.ids if ids is None else ids
            count = encode(ids, lambda mine: FeatureBlocks(reader, [ids[k] for k in mine], batch_size), "images", {})
            side = "images"
    else:
        chosen = read_split(source, split)
        tokens = None if clip else loaded.tokenize(chosen.captions)
        count = encode(chosen.caption_ids, (lambda mine: [chosen.captions[k] for k in mine]) if clip else
                       (lambda mine: CaptionBlocks([tokens[k] for k in mine], batch_size)), "captions",
                       {"split": chosen.name}, [chosen.image_ids[i] for i in chosen.caption_image_index])
        side = "captions"
    log.info("encoded %d %s with %s", count, side, loaded.name)
    return count


def _encode_images(loaded: OpenClipModel, source: PathLike | Sequence[PathLike], out: str | None,
                   device: torch.device, write: WriteEmbeddings, batch_size: int, precision: str, workers: int,
                   resume: bool, checkpoint_seconds: float, part: Part | None) -> int:
    """`encode_file` of the images of an images input (or a list of them; those of `part` with one) by an OpenCLIP
    model: decoded in `workers` processes, those that cannot be used skipped, counted and recorded (`/failed`), as
    extract-regions does; returns how many were encoded."""
    every = image_inputs(source)
    items = part_ids(every, part, batch_size)
    by_id = {item.image_id: item for item in items}
    ids = list(by_id)
    failed: list[str] = []
    rows = {"model": "openclip", "checkpoint": str(loaded.path), "digest": loaded.digest, "precision": precision,
            "side": "images"}
    digests = {item.image_id: input_digest([item.path], loaded.digest) for item in items}

    def produce(todo: list[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        for done, emb in image_embeddings(loaded.clip, [by_id[i] for i in todo], device, precision, batch_size, workers,
                                          failed):
            yield done, {"rows": emb}

    with checkpoint(out, EMBEDDINGS, rows, digests, resume, checkpoint_seconds) as kept:
        run("encode", ids, kept, produce, "images", batch_size)
        done = [i for i in ids if i in kept.done]
        if not done:
            kept.discard()
            image_id, reason = failed[0].split("\t", 1)
            raise VLToolsError(f"every one of the {len(ids)} images failed (first: {image_id}: {reason}); nothing to "
                               "encode")
        attrs = {"model": "openclip", "checkpoint": str(loaded.path), "checkpoint_digest": loaded.digest,
                 "source": str(source), "precision": precision, **loaded.clip.provenance(), "side": "images",
                 "ids_digest": ids_digest(done), **(part.attrs(len(every), batch_size) if part is not None else {})}
        write(done, (arrays["rows"] for _, arrays in kept.gather(done, batch_size)), attrs, None, failed)
        kept.remove()
    report_skipped("encode", out, len(done), failed)
    return len(done)


def encode_embeddings(loaded: LoadedModel, source: PathLike, device: torch.device,
                      **options: object) -> Embeddings | None:
    """`encode_file` (with its keyword `options`) without a file: the embeddings in memory, checked as their file's
    reader checks them (under torchrun, each process's part)."""
    found: list[Embeddings] = []

    def keep(ids: Sequence[str], blocks: Iterable[np.ndarray], attrs: dict[str, object],
             caption_image_ids: Sequence[str] | None = None, failed: Sequence[str] | None = None) -> None:
        vectors = np.concatenate([np.asarray(block, dtype=np.float32) for block in blocks])
        refuse_nonfinite("the embeddings", "emb", vectors, list(ids))
        found.append(Embeddings(list(ids), vectors, str(attrs["side"]),
                                None if caption_image_ids is None else list(caption_image_ids),
                                {**attrs, **({} if failed is None else {"num_failed": len(failed)})}))

    encode_file(loaded, source, None, device, write=keep, **options)
    return found[0] if found else None


def _refuse_unread(loaded: LoadedModel, features_in: bool, vectors_in: bool, concepts: PathLike | None,
                   sentences: PathLike | None) -> None:
    """Refuse concept scores or generated sentences that `loaded` would not read (they were ignored without a
    word: a vse model given --sentences encoded the features alone): only an SCO model encoding a features file
    (`vectors_in`) reads concepts (a context-only one passes over them, as the SCO recipe gives them to every
    variant), and only one trained with model.use_sentence ("ctx + sen") reads sentences. `features_in`: the
    source is a features file (not captions, nor rmac's images)."""
    if concepts is None and sentences is None:
        return
    captions_in = loaded.name != "rmac" and not features_in
    what = f"{loaded.name} model {loaded.path}{' encoding captions' if captions_in else ''}"
    if concepts is not None and not vectors_in:
        raise VLToolsError(f"{argument('concepts')}: the {what} reads no concept scores (only an SCO model "
                           f"encoding features does); leave it out")
    if sentences is not None and not (vectors_in and loaded.config.get("use_sentence")):
        raise VLToolsError(f"{argument('sentences')}: the {what} reads no generated sentences (only an SCO \"ctx + "
                           f"sen\" model, trained with model.use_sentence, encoding features does); leave it out")
