"""`vltools match`: rank captions for images and images for captions with trained matching models."""

from __future__ import annotations

import click
import numpy as np
import torch

from vltools.commands.options import FiniteFloat, block_options, device_option, output_option, precision_option
from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.data.captions import check_images, read_split
from vltools.devices import resolve_device
from vltools.errors import VLToolsError
from vltools.infer.embed import full_sims, require_separable
from vltools.infer.loader import check_features, hdf5_kind, load_model, load_models
from vltools.infer.rerank import FirstStage, rerank
from vltools.infer.similarity import similarity_blocks
from vltools.infer.topk import EXACT, drop_self, rankings, search, topk_rows
from vltools.io.embeddings import Embeddings, check_same_model, open_embeddings
from vltools.io.features import FeaturesReader
from vltools.io.model_store import resolve_models
from vltools.io.progress import log
from vltools.io.provenance import ids_digest
from vltools.io.records import write_records
from vltools.io.sims import average_sims, read_sims, write_sims

MEMORY_NOTE = """\b
Memory (SGR at official sizes, default blocks, fp32): peak = ~0.7 GB (torch, model, one image block) + ~0.5 GB
(one block's work: SGR chunks its [images x captions x words x 1024] intermediates to 2^25 floats) + cached image
embeddings (n_images x 36 x 1024 x 4 B, at most --image-cache-mb) + the output (n_images x n_captions x 4 B).
Measured 1.22 GB for 128 x 1024 on CPU; so about 1.4 GB for 1K x 5K and 2.5 GB for 5K x 25K
(details: examples/sgraf/README.md)."""


@click.command("match", epilog=MEMORY_NOTE)
@click.argument("first", metavar="FEATS.h5|IMG_EMB.h5|SIMS.h5", type=click.Path(dir_okay=False))
@click.argument("second", metavar="CAPS.jsonl|CAP_EMB.h5|SIMS.h5", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--model", "model_paths", multiple=True, metavar="CKPT|NAME",
              help="Matching checkpoint, or a name from `vltools models list` (all its checkpoints); repeat for an "
                   "ensemble (SGRAF = --model sgr.pt --model saf.pt, or --model sgraf: mean of their similarities). "
                   "Not used with two embeddings files.")
@click.option("--split", help="Captions of this split are matched [test when the captions have a split field, else "
              "every caption].")
@click.option("--top-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Results kept per query in the rankings.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Rankings JSONL (default: standard output).")
@output_option("--sims", "sims_path", type=click.Path(dir_okay=False), binary="HDF5",
              help="Also write the full n_images x n_captions matrix (HDF5 that `vltools score retrieval` reads).")
@click.option("--rerank", "rerank_k", type=click.IntRange(min=1), metavar="K",
              help="Two-stage search: --first-stage proposes K candidates per query, --model reranks only those.")
@click.option("--first-stage", type=click.Path(dir_okay=False), metavar="VSE.pt",
              help="Separable checkpoint (vse) proposing candidates for --rerank.")
@click.option("--index", default=EXACT, show_default=True,
              help="Search over separable embeddings: exact (blocked matmul) or a FAISS index factory string "
                   "such as Flat, IVF1024,Flat, IVF4096,PQ64 (needs faiss).")
@click.option("--nprobe", type=click.IntRange(min=1), default=16, show_default=True,
              help="IVF lists visited per query (FAISS IVF indexes).")
@block_options(128, 512)
@click.option("--image-cache-mb", type=FiniteFloat(min=0), default=2048.0, show_default=True,
              help="Image embeddings kept between caption blocks, at most this many MB (the rest is re-encoded); "
                   "with --rerank, the encoded candidates kept between query blocks.")
@precision_option()
@device_option()
def command(first: str, second: str, model_paths: tuple[str, ...], split: str | None, top_k: int, output: str | None,
            sims_path: str | None, rerank_k: int | None, first_stage: str | None, index: str, nprobe: int,
            block_images: int, block_captions: int, image_cache_mb: float, precision: str, device: str) -> None:
    """Rank captions for every image (i2t) and images for every caption (t2i): top-k per query as rankings JSONL.

    Either FEATS.h5 (region features) and CAPS.jsonl with --model (cross-attention or separable checkpoints),
    or two similarity matrices of `match --sims` (ranked by their mean: SGRAF from the saved SGR and SAF
    matrices), or two files from `vltools encode` (image then caption embeddings of one separable model), or two image
    embeddings files (query images then database images, e.g. rmac): images ranked for images (i2i), each query
    left out of its own list.
    Queries follow input order: images in order of first mention in the split's captions, then captions
    in file order. Every image a selected caption names must be in FEATS.h5.
    """
    if hdf5_kind(first) == "sims":
        if model_paths or rerank_k:
            raise VLToolsError(f"{first}: similarity matrices were given, which are already scored; drop "
                               "--model/--rerank")
        _match_sims(first, second, top_k, output, sims_path)
        return
    if hdf5_kind(first) == "embeddings":
        if model_paths or rerank_k:
            raise VLToolsError(f"{first}: embeddings were given, which are already encoded; drop --model/--rerank")
        _match_embeddings(first, second, top_k, output, sims_path, index, nprobe, resolve_device(device))
        return
    if rerank_k is not None and first_stage is None:
        raise VLToolsError("--rerank K needs --first-stage VSE.pt, the separable model that proposes candidates")
    if rerank_k is not None and sims_path:
        raise VLToolsError("--sims needs every pair scored, which --rerank avoids; drop one of them")
    chosen = read_split(second, split)
    check_images(chosen, first, second)
    loaded = load_models(resolve_models(model_paths))
    chosen_device = resolve_device(device)
    for item in loaded:
        item.model.to(chosen_device)
    tokens = loaded[0].tokenize(chosen.captions)
    caption_image_ids = [chosen.image_ids[i] for i in chosen.caption_image_index]
    with FeaturesReader(first) as reader:
        check_features(reader, loaded)
        images = FeatureBlocks(reader, chosen.image_ids, block_images)
        captions = CaptionBlocks(tokens, block_captions)
        models = [item.model for item in loaded]
        if rerank_k is not None:
            stage_paths = resolve_models([first_stage])
            if len(stage_paths) != 1:
                raise VLToolsError(f"--first-stage {first_stage}: names an ensemble of {len(stage_paths)} checkpoints; "
                                   "the first stage is one separable model")
            stage = load_model(stage_paths[0])
            require_separable(stage.model, stage.name, first_stage)
            check_features(reader, [stage])
            stage.model.to(chosen_device)
            plan = FirstStage(stage.model, CaptionBlocks(stage.tokenize(chosen.captions), block_captions),
                              index, nprobe)
            (i2t_values, i2t_indices), (t2i_values, t2i_indices) = rerank(
                models, plan, images, captions, rerank_k, top_k, chosen_device, precision, image_cache_mb)
        else:
            sims = similarity_blocks(models, images, captions, chosen_device, precision, image_cache_mb)
            i2t_values, i2t_indices = topk_rows(sims, top_k)
            t2i_values, t2i_indices = topk_rows(sims.T, top_k)
    if sims_path:
        write_sims(sims_path, sims.numpy(), chosen.image_ids, chosen.caption_ids, caption_image_ids,
                   attrs={"models": ",".join(str(i.path) for i in loaded),
                          "model_names": ",".join(i.name for i in loaded),
                          "checkpoint_digests": ",".join(i.digest for i in loaded), "features": first,
                          "captions": second, "split": chosen.name, "precision": precision,
                          "image_ids_digest": ids_digest(chosen.image_ids),
                          "caption_ids_digest": ids_digest(chosen.caption_ids)})
    _write_rankings(output, chosen.image_ids, chosen.caption_ids, (i2t_values, i2t_indices), (t2i_values, t2i_indices))
    log.info("matched %d images x %d captions with %s", len(chosen.image_ids), len(chosen.captions),
             " + ".join(i.name for i in loaded))


def _write_rankings(output: str | None, image_ids: list[str], caption_ids: list[str], i2t: tuple, t2i: tuple) -> None:
    def records():
        yield from rankings(image_ids, caption_ids, np.asarray(i2t[0]), np.asarray(i2t[1]), "i2t")
        yield from rankings(caption_ids, image_ids, np.asarray(t2i[0]), np.asarray(t2i[1]), "t2i")

    write_records(output, records())


def _match_sims(first: str, second: str, top_k: int, output: str | None, sims_path: str | None) -> None:
    """Rankings of the mean of two saved similarity matrices (the SGRAF ensemble of `match --sims` outputs of SGR
    and SAF), without scoring any pair again."""
    if hdf5_kind(second) != "sims":
        raise VLToolsError(f"{second}: expected a second similarity matrix (match --sims) after {first}")
    mean = average_sims([(path, read_sims(path)) for path in (first, second)])
    sims = torch.from_numpy(mean.sims.astype(np.float32))
    if sims_path:
        write_sims(sims_path, sims.numpy(), mean.image_ids, mean.caption_ids, mean.caption_image_ids,
                   attrs={"ensemble_of": f"{first},{second}"})
    _write_rankings(output, mean.image_ids, mean.caption_ids, topk_rows(sims, top_k), topk_rows(sims.T, top_k))
    log.info("ranked %d images x %d captions by the mean of %s and %s", len(mean.image_ids), len(mean.caption_ids),
             first, second)


def _match_embeddings(first: str, second: str, top_k: int, output: str | None, sims_path: str | None,
                      index: str, nprobe: int, device: torch.device) -> None:
    """Top-k search (and optionally the full matrix) between image and caption embeddings files."""
    images = open_embeddings(first)
    try:
        if hdf5_kind(second) != "embeddings":
            raise VLToolsError(f"{second}: expected caption embeddings (vltools encode CAPS.jsonl) after the image "
                               f"embeddings {first}")
        captions = open_embeddings(second)
        try:
            if images.side == "images" and captions.side == "images":
                _match_images(images, captions, top_k, output, sims_path, index, nprobe, device)
                return
            _check_pair(images, captions)
            i2t = search(images.emb, captions.emb, top_k, index, nprobe, device)
            t2i = search(captions.emb, images.emb, top_k, index, nprobe, device)
            if sims_path:
                write_sims(sims_path, full_sims(images.emb, captions.emb), images.ids, captions.ids,
                           captions.caption_image_ids,
                           attrs={"image_embeddings": first, "caption_embeddings": second,
                                  "checkpoint_digest": str(images.checkpoint_digest)})
        finally:
            captions.close()
    finally:
        images.close()
    _write_rankings(output, images.ids, captions.ids, i2t, t2i)


def _match_images(queries: Embeddings, database: Embeddings, top_k: int, output: str | None, sims_path: str | None,
                  index: str, nprobe: int, device: torch.device) -> None:
    """i2i: rank the database images for each query image (the query itself left out of its own list)."""
    check_same_model(queries, database)
    values, indices = search(queries.emb, database.emb, top_k + 1, index, nprobe, device)
    values, indices = drop_self(queries.ids, database.ids, values, indices, top_k)
    if sims_path:
        write_sims(sims_path, full_sims(queries.emb, database.emb), queries.ids, database.ids,
                   attrs={"query_embeddings": str(queries.path), "database_embeddings": str(database.path),
                          "checkpoint_digest": str(queries.checkpoint_digest), "direction": "i2i"})
    write_records(output, rankings(queries.ids, database.ids, values, indices, "i2i"))
    log.info("ranked %d database images for %d query images", len(database.ids), len(queries.ids))


def _check_pair(images: Embeddings, captions: Embeddings) -> None:
    """Image embeddings first, caption embeddings second, both from the same checkpoint."""
    if images.side != "images":
        raise VLToolsError(f"{images.path}: holds {images.side or 'unknown'} embeddings; give the image embeddings "
                           "first, then the caption embeddings")
    if captions.side != "captions":
        raise VLToolsError(f"{captions.path}: holds {captions.side or 'unknown'} embeddings; give caption "
                           "embeddings (vltools encode CAPS.jsonl) second")
    check_same_model(images, captions)
