"""`vltools match` and `vltools.match`: captions ranked for images and images for captions, by matching models over
features and captions, by an OpenCLIP model over images and captions (zero-shot), by saved similarity matrices, by
embeddings, or by a saved index."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vltools.devices import resolve_device
from vltools.distributed import place
from vltools.errors import ArgumentError, VLToolsError, argument, shown
from vltools.infer import checks
from vltools.infer.settings import COMMIT_SECONDS, EXACT, check_search, locked_part
from vltools.io.hdf5 import hdf5_kind
from vltools.io.held import instance_of
from vltools.io.lock import output_lock
from vltools.io.model_store import is_openclip, resolve_models
from vltools.io.output import is_stdout
from vltools.io.progress import log
from vltools.io.records import write_records
from vltools.io.sims import write_sims

if TYPE_CHECKING:
    from vltools.infer.loader import LoadedModel
    from vltools.infer.match import Matches, Search

PathLike = str | os.PathLike
LOADER = "vltools.infer.loader"    # LoadedModel's module: imported (with torch) once the arguments are checked
ModelLike = "PathLike | LoadedModel | Sequence[PathLike | LoadedModel]"


def model_items(model: object, name: str) -> list[PathLike | LoadedModel]:
    """`model` as a list of checkpoints, store names and LoadedModels, refusing anything else by `name`."""
    items = [model] if isinstance(model, str | os.PathLike) or instance_of(model, LOADER, "LoadedModel") else model
    if not isinstance(items, list | tuple) or not all(instance_of(item, LOADER, "LoadedModel") or
                                                       (isinstance(item, str | os.PathLike) and os.fspath(item))
                                                       for item in items):
        raise ArgumentError(name, "must be a checkpoint path, a model-store name, a LoadedModel or a list of them, "
                                  f"not {shown(model)}")
    return list(items)


def loaded_models(items: Sequence[PathLike | LoadedModel], name: str = "model") -> list[LoadedModel]:
    """Loaded matching models from checkpoints, store names (all their members) and LoadedModels."""
    from vltools.infer.loader import LoadedModel, load_models

    loaded = [item for item in items if isinstance(item, LoadedModel)]
    paths = resolve_models([str(item) for item in items if not isinstance(item, LoadedModel)], name)
    return loaded + load_models(paths) if paths else loaded


def match(first: PathLike, second: PathLike | None = None, model: ModelLike = (), *, split: str | None = None,
          top_k: int = 10, output: PathLike | None = None, sims: PathLike | None = None, rerank_k: int | None = None,
          first_stage: PathLike | LoadedModel | None = None, index: str = EXACT, index_file: PathLike | None = None,
          nprobe: int = 16, block_images: int = 128, block_captions: int = 512, image_cache_mb: float = 2048.0,
          precision: str = "fp32", device: str = "auto", resume: bool = False,
          checkpoint_seconds: float = COMMIT_SECONDS,
          first_stage_images: PathLike | Sequence[PathLike] | None = None) -> Matches | None:
    """Rank captions for every image (i2t) and images for every caption (t2i), top `top_k` per query: FIRST
    features and SECOND captions with `model` (cross-attention or separable checkpoints, store names, loaded models:
    their mean), FIRST images (a folder, or images inputs) and SECOND captions with one OpenCLIP `model`
    (`openclip:ARCH[:PRETRAINED_OR_FILE]`, zero-shot), a similarity matrix (`match --sims` output: a file or a
    folder of parts) or the mean of two, image then caption embeddings, or query then database image embeddings
    (i2i); with `index_file` and no SECOND, FIRST's embeddings search a saved index. With `rerank_k`, the separable
    `first_stage` proposes that many candidates per query and only those are scored; an OpenCLIP first stage
    embeds the images of `first_stage_images`.

    The rankings go to `output` as JSONL (`-`: standard output; None: not written) and the whole matrix to `sims`
    (HDF5) when given; the `Matches` is returned, with `.sims` where it is written or nothing is. A match scoring
    every pair keeps its finished captions in `OUTPUT.partial/` for `resume` (vltools.io.checkpoint). Under torchrun
    such a match has each process score its run of the caption blocks into its part of the folder `sims` (no
    `output`: rankings need every caption; `match FOLDER` ranks them), and the other modes run on the first
    process alone (None on the others)."""
    items = model_items(model, "model")
    checks.path(output, "output", optional=True)
    checks.path(sims, "sims", optional=True)
    checks.split(split, "split", optional=True)
    checks.optional_integer(rerank_k, "rerank_k", 1)
    checks.flag(resume, "resume")
    if first_stage is not None and not instance_of(first_stage, LOADER, "LoadedModel"):
        checks.path(first_stage, "first_stage")
    checks.device(device, "device")
    check_search(top_k, precision, block_images, block_captions, image_cache_mb, index, nprobe, checkpoint_seconds)
    if second is None and index_file is None and not _ranked_alone(first):
        raise ArgumentError("second", f"is missing (only {argument('index_file')} searches one input, and a "
                                      "similarity matrix is ranked alone)")
    from vltools.infer.loader import OpenClipModel  # torch: once each argument is checked, before their combinations
    from vltools.infer.match import (
        SIDES,
        Search,
        check_index,
        check_index_file,
        check_resume,
        input_kind,
        match_embeddings,
        match_features,
        match_index,
        match_openclip,
        match_sims,
    )

    options = Search(top_k, resolve_device(device), precision, block_images, block_captions, image_cache_mb, index,
                     nprobe, index_file, checkpoint_seconds)
    # loaded first: a checkpoint of `train --model clip` ranks images and captions as an OpenCLIP model does
    items = loaded_models(items) if items and not any(is_openclip(item) for item in items) else items
    first_stage = first_stage if first_stage is None or is_openclip(first_stage) else _first_stage(first_stage)
    clip = any(isinstance(item, OpenClipModel) or is_openclip(item) for item in items)
    kind = "openclip" if clip else input_kind(first, bool(items), rerank_k)
    if clip and (rerank_k is not None or len(items) > 1):
        raise VLToolsError(f"{argument('model', 'openclip:...')} ranks the images and captions on its own (zero-shot); "
                           f"to propose candidates for other models give it as {argument('first_stage')}")
    if first_stage_images is not None and not is_openclip(first_stage) and not isinstance(first_stage, OpenClipModel):
        raise VLToolsError(f"{argument('first_stage_images')} is read by an OpenCLIP {argument('first_stage')} "
                           "(openclip:ARCH), which embeds image files; drop it")
    parts = place().active and kind == "features" and rerank_k is None
    if parts and (not is_stdout(output) or sims is None):
        raise VLToolsError(f"under torchrun each process scores its part of the captions into {argument('sims')} "
                           f"FOLDER (rankings need every caption): give {argument('sims')} FOLDER and no "
                           f"{argument('output')}, then rank them in one process: vltools match FOLDER -o "
                           "RANKINGS.jsonl")
    kept = sims if parts else output      # what a resumed run continues: the sims parts under torchrun
    check_resume(kind, rerank_k, None if kept is None else str(kept), resume)
    full = sims is not None or (output is None and rerank_k is None and index_file is None)
    check_index_file(kind, second, options, rerank_k, full)
    if parts:
        return _match_parts(first, second, items, split, options, sims, resume)
    with output_lock(output, sims):
        if not place().main:
            return None          # another process of a torchrun job: the first runs these modes alone
        if kind == "features":
            stage = None if first_stage is None else _first_stage(first_stage)
            loaded = loaded_models(items)
            check_index(kind, options.index, loaded, rerank_k)
            found = match_features(first, second, loaded, split, options, full, rerank_k, stage, output, resume,
                                   lambda matches: _write(matches, output, sims), first_stage_images)
            what = " + ".join(item.name for item in loaded)
        elif kind == "openclip":
            check_index(kind, options.index, (), rerank_k)
            found = match_openclip(first, second, loaded_models(items)[0], split, options, full)
            _write(found, output, sims)
            what = str(found.attrs["models"])
        else:
            check_index(kind, options.index, (), rerank_k)
            if kind == "embeddings" and index_file is not None:
                found = match_index(first, index_file, options)
            elif kind == "sims":
                found = match_sims(first, second, top_k)
            else:
                found = match_embeddings(first, second, options, full)
            _write(found, output, sims)
            what = kind
    if found is not None:
        rows, columns = SIDES[found.direction]
        log.info("matched %d %s x %d %s with %s", len(found.row_ids), rows, len(found.column_ids), columns, what)
    return found


def _ranked_alone(first: PathLike) -> bool:
    """Whether FIRST is a similarity matrix (a file or a folder of parts), which `match` ranks without a second
    input; a file that cannot be read is left to its reader, once the arguments are checked."""
    try:
        return hdf5_kind(first) == "sims"
    except VLToolsError:
        return False


def _match_parts(first: PathLike, second: PathLike, items: Sequence[PathLike | LoadedModel], split: str | None,
                 options: Search, sims: PathLike, resume: bool) -> Matches:
    """Every pair scored under torchrun: this process's run of the caption blocks, its columns written as its part
    of the set of sims in the folder `sims` (vltools.io.shards), which `match FOLDER` then ranks."""
    from vltools.infer.match import check_index, match_features

    with locked_part(sims, None, "h5") as (target, part):
        loaded = loaded_models(items)
        check_index("features", options.index, loaded, None)
        found = match_features(first, second, loaded, split, options, True, output=target, resume=resume,
                               write=lambda matches: _write(matches, None, target), part=part)
    log.info("matched %d images x %d captions (part %s) with %s into %s; rank the set of parts with `vltools match "
             "%s -o RANKINGS.jsonl`", len(found.row_ids), len(found.column_ids), part.name,
             " + ".join(item.name for item in loaded), target, sims)
    return found


def _first_stage(first_stage: PathLike | LoadedModel) -> LoadedModel:
    """The one separable model that proposes candidates for reranking."""
    from vltools.infer.loader import LoadedModel, load_model

    if isinstance(first_stage, LoadedModel):
        return first_stage
    paths = resolve_models([str(first_stage)], "first_stage")
    if len(paths) != 1:
        raise VLToolsError(f"{argument('first_stage', str(first_stage))}: names an ensemble of {len(paths)} "
                           "checkpoints; the first stage is one separable model")
    return load_model(paths[0], option="first_stage")


def _write(matches: Matches, output: PathLike | None, sims: PathLike | None) -> None:
    """The similarity matrix to `sims` and the rankings to `output`, each when given."""
    if sims is not None:
        write_sims(sims, matches.sims, matches.row_ids, matches.column_ids, matches.caption_image_ids,
                   attrs=matches.attrs)
    if output is not None:
        write_records(output, matches.rankings())
