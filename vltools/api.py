"""The Python API: the stages as functions for notebooks and scripts, calling the same library code as the
command line (`vltools.match(...)` is `vltools match ...` without the files in between when you don't want them).

    import vltools
    vltools.extract_regions(["imgs/"], "feats.h5", regions="bottom-up")
    found = vltools.match("feats.h5", "caps.jsonl", model="sgraf")      # a Matches: sims, ranked lists
    vltools.score_retrieval(found)                                       # {"i2t": {"R@1": ...}, ...}
    vltools.caption("captioner.pt", "feats.h5")                          # [{"image_id", "caption"}, ...]
    model = vltools.load_model("sgr.pt")                                 # LoadedModel: .model is the nn.Module

Every argument is checked before any work by the same validators as the command line's options
(`vltools.infer.checks`); errors are `vltools.errors.VLToolsError`, one line naming the argument by its Python
name (`top_k must be a positive integer, not -1`) or the file and what is wrong in it.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence

from vltools.data.retrieval import PROTOCOLS, sims_scores, summary
from vltools.data.retrieval import score_retrieval as score_files
from vltools.devices import PRECISIONS, autocast, resolve_device
from vltools.errors import VLToolsError
from vltools.infer import checks
from vltools.infer.caption import caption_batches, images_to_caption, split_records
from vltools.infer.loader import ROLES, LoadedModel, load_models
from vltools.infer.loader import load_model as load_checkpoint_model
from vltools.infer.match import Matches, Search, match_files, match_index
from vltools.infer.regions import RegionOptions
from vltools.infer.regions import extract_regions as extract_region_features
from vltools.infer.settings import RunOptions
from vltools.io.features import FeaturesReader
from vltools.io.model_store import resolve_models
from vltools.io.sims import Sims

PathLike = str | os.PathLike
ModelLike = PathLike | LoadedModel | Sequence[PathLike | LoadedModel]

__all__ = ["Matches", "caption", "extract_regions", "load_model", "match", "score_retrieval", "search"]


def load_model(name_or_path: PathLike, role: str = "matching") -> LoadedModel:
    """The model of a checkpoint file or of a model-store name with one member (`vltools models list`), built in
    eval mode on the CPU. `role` is what it must be able to do: matching, encodable, captioner, l2c, concepts or
    detector (see `vltools.infer.loader.ROLES`)."""
    checks.path(name_or_path, "name_or_path")
    checks.choice(role, "role", ROLES)
    paths = resolve_models([str(name_or_path)])
    if len(paths) != 1:
        raise VLToolsError(f"{name_or_path}: names an ensemble of {len(paths)} checkpoints; load its members one "
                           "by one, or give the name to match(model=...)")
    return load_checkpoint_model(paths[0], role)


def _keywords(function: Callable, *options: type) -> set[str]:
    """The keywords `function` takes: its own parameters and the fields of the option dataclasses its `**options`
    fill (for `checks.known`, which suggests the nearest one to a misspelt keyword)."""
    named = {name for name, parameter in inspect.signature(function).parameters.items()
             if parameter.kind is not parameter.VAR_KEYWORD}
    return named.union(*(dataclass.__dataclass_fields__ for dataclass in options))


def _model_items(model: object, name: str) -> list[PathLike | LoadedModel]:
    """`model` as a list of checkpoints, store names and LoadedModels, refusing anything else by `name`."""
    items = [model] if isinstance(model, str | os.PathLike | LoadedModel) else model
    if not isinstance(items, list | tuple) or not all(isinstance(item, str | os.PathLike | LoadedModel) and
                                                       (isinstance(item, LoadedModel) or os.fspath(item))
                                                       for item in items):
        raise checks.ArgumentError(name, "must be a checkpoint path, a model-store name, a LoadedModel or a list "
                                         f"of them, not {model!r}")
    return list(items)


def _models(items: list[PathLike | LoadedModel]) -> list[LoadedModel]:
    """Loaded matching models from checkpoints, store names (all their members) and LoadedModels."""
    loaded = [item for item in items if isinstance(item, LoadedModel)]
    paths = resolve_models([str(item) for item in items if not isinstance(item, LoadedModel)])
    return loaded + load_models(paths) if paths else loaded


def extract_regions(inputs: PathLike | Sequence[PathLike], output: PathLike, *, regions: str = "detector",
                    backbone: str = "resnet101", weights: str = "imagenet", device: str = "auto",
                    batch_size: int = 8, workers: int = 2, strict: bool = False, **options: object) -> dict[str, int]:
    """`vltools extract-regions INPUTS -o OUTPUT`: region features of images (folders, image files, tar shards,
    path lists or an images JSONL) in a features HDF5; returns {"written": n, "failed": n}. Further keyword
    options are those of `vltools.infer.regions.RegionOptions` (num_regions, global_pool, image_size, ...) and
    `vltools.infer.settings.RunOptions` (precision, dtype, max_pixels, seed, ...)."""
    inputs = checks.paths(inputs, "inputs")
    checks.path(output, "output")
    region_fields = set(RegionOptions.__dataclass_fields__)
    run_fields = set(RunOptions.__dataclass_fields__)
    checks.known(options, _keywords(extract_regions, RegionOptions, RunOptions), "extract_regions")
    chosen = RegionOptions(regions=regions, backbone=backbone, weights=weights,
                           **{k: v for k, v in options.items() if k in region_fields})
    run = RunOptions(device=device, batch_size=batch_size, workers=workers, strict=strict,
                     **{k: v for k, v in options.items() if k in run_fields})
    return extract_region_features(inputs, output, chosen, run)


def match(first: PathLike, second: PathLike, model: ModelLike = (), *, split: str | None = None, top_k: int = 10,
          device: str = "auto", precision: str = "fp32", rerank_k: int | None = None,
          first_stage: PathLike | LoadedModel | None = None, **search: object) -> Matches:
    """`vltools match FIRST SECOND [--model ...]`: features + captions with a model (a checkpoint, a store name
    such as "sgraf", loaded models, or a list: their mean), two sims files, or two embeddings files. Returns a
    `Matches`: `.sims` (the full matrix, unless reranking), `.row_ids`, `.column_ids`, `.forward` / `.backward`
    (top-k scores and indices) and `.rankings()` (the records `match -o` writes). Further keyword options are
    those of `vltools.infer.match.Search` (block_images, block_captions, image_cache_mb, index, nprobe)."""
    checks.path(first, "first")
    checks.path(second, "second")
    items = _model_items(model, "model")
    checks.text(split, "split", optional=True)
    checks.optional_integer(rerank_k, "rerank_k", 1)
    if first_stage is not None and not isinstance(first_stage, LoadedModel):
        checks.path(first_stage, "first_stage")
    checks.known(search, _keywords(match, Search), "match")
    options = Search(top_k=top_k, device=resolve_device(checks.text(device, "device")), precision=precision,
                     **search)
    models = _models(items) if items else []
    stage = None
    if first_stage is not None:
        stage = first_stage if isinstance(first_stage, LoadedModel) else load_model(first_stage)
    return match_files(first, second, models, split, options, rerank_k is None, rerank_k, stage)


def search(queries: PathLike, index_file: PathLike, top_k: int = 10, nprobe: int = 16) -> Matches:
    """`vltools match QUERIES --index-file INDEX`: the top-k rows of a saved index (`vltools index`) for every
    query of an embeddings file encoded by the same checkpoint, without rebuilding it. Returns a `Matches` whose
    `.forward` holds (scores, row indices) and `.rankings()` the records; `nprobe`: IVF lists visited."""
    checks.path(queries, "queries")
    checks.path(index_file, "index_file")
    return match_index(queries, index_file, Search(top_k=top_k, nprobe=nprobe))


def score_retrieval(scores: Matches | PathLike | Sequence[PathLike], captions: PathLike | None = None, *,
                    protocol: str = "full", fold_size: int = 1000, split: str | None = None) -> dict:
    """`vltools score retrieval`: R@1/5/10 both ways, medr, meanr, rsum and mR of a `Matches` with its full
    matrix, or of files (sims HDF5 / .npy matrices, averaged when several, or one rankings JSONL with
    `captions`)."""
    checks.path(captions, "captions", optional=True)
    checks.choice(protocol, "protocol", PROTOCOLS)
    checks.integer(fold_size, "fold_size", 1)
    checks.text(split, "split", optional=True)
    if isinstance(scores, Matches):
        if scores.sims is None or scores.caption_image_ids is None:
            raise VLToolsError("these matches have no full similarity matrix with each caption's image (reranked, "
                               "or images ranked for images); score the rankings written by match -o instead")
        sims = Sims(scores.sims, scores.row_ids, scores.column_ids, scores.caption_image_ids)
        return summary(sims_scores(sims, "matches", protocol, fold_size), protocol, fold_size)
    return score_files(checks.paths(scores, "scores"), captions, protocol, fold_size, split)


def caption(model: PathLike | LoadedModel, features: PathLike, captions: PathLike | None = None, *,
            split: str | None = None, beam: int = 3, max_len: int | None = None, length_penalty: float = 0.0,
            batch_size: int = 50, device: str = "auto", precision: str = "fp32") -> list[dict]:
    """`vltools caption --model MODEL FEATURES [CAPTIONS]`: one {"image_id", "caption"} per image of FEATURES
    (or of the `split` of CAPTIONS, in first-mention order) by beam search (`beam` 1: greedy)."""
    if not isinstance(model, LoadedModel):
        checks.path(model, "model")
    checks.path(features, "features")
    checks.path(captions, "captions", optional=True)
    checks.text(split, "split", optional=True)
    checks.integer(beam, "beam", 1, checks.MAX_BEAM)
    checks.optional_integer(max_len, "max_len", 1, checks.MAX_CAPTION_WORDS)
    checks.number(length_penalty, "length_penalty", 0)
    checks.integer(batch_size, "batch_size", 1)
    checks.text(device, "device")
    checks.choice(precision, "precision", PRECISIONS)
    loaded = model if isinstance(model, LoadedModel) else load_model(model, "captioner")
    chosen = resolve_device(device)
    records = split_records(captions, split) if captions is not None else None
    method = "beam" if beam > 1 else "greedy"
    found: list[dict] = []
    with FeaturesReader(features) as reader, autocast(chosen, precision):
        image_ids = images_to_caption(reader, records, captions)
        for ids, texts in caption_batches(loaded.model, loaded.vocab, reader, image_ids, method, beam_size=beam,
                                          max_len=max_len or loaded.prep.max_words or 16,
                                          length_penalty=length_penalty, batch_size=batch_size, device=chosen):
            found += [{"image_id": i, "caption": text} for i, text in zip(ids, texts, strict=True)]
    return found
