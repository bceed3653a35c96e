"""The Python API: the stages as functions for notebooks and scripts, calling the same library code as the
command line (`vltools.match(...)` is `vltools match ...` without the files in between when you don't want them).

    import vltools
    vltools.extract_regions(["imgs/"], "feats.h5", regions="bottom-up")
    found = vltools.match("feats.h5", "caps.jsonl", model="sgraf")      # a Matches: sims, ranked lists
    vltools.score_retrieval(found)                                       # {"i2t": {"R@1": ...}, ...}
    vltools.caption("captioner.pt", "feats.h5")                          # [{"image_id", "caption"}, ...]
    emb = vltools.encode("caps.jsonl", "vse.pt")                         # Embeddings: .ids, .vectors (numpy)
    model = vltools.load_model("sgr.pt")                                 # LoadedModel: .model is the nn.Module

Data a stage reads from a file may be given in memory instead: records as lists of dicts (what `convert`, `caption`
and `Matches.rankings()` give), features as {"ids": [...], "regions": array, ...} (numpy arrays or tensors), the
`Embeddings` `encode` returns, a `Matches` for rankings, a dict for scores. Each is written to a temporary file of
its kind (`vltools.io.spooled`) and read by that file's reader, with every check, giving what the file gives; an
error names the argument. Features given to `match` and `encode` skip the file: the features reader reads them in
memory, with the same checks. What a stage writes the function returns, writing it only when given an output.

Every argument is checked before any work by the same validators as the command line's options
(`vltools.infer.checks`); errors are `vltools.errors.VLToolsError`, one line naming the argument by its Python
name (`top_k must be a positive integer, not -1`; `topk is not an argument of vltools.search; did you mean
top_k?`) or the file and what is wrong in it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from vltools.data.caption_scores import score_caption_files, score_self_retrieval_file
from vltools.data.converters import birds_to_words, karpathy, precomp
from vltools.data.semantic_scores import score_semantic_file
from vltools.devices import PRECISIONS, resolve_device
from vltools.distributed import place
from vltools.errors import VLToolsError, shown
from vltools.eval.retrieval import PROTOCOLS
from vltools.eval.self_retrieval import KS as SELF_RETRIEVAL_KS
from vltools.eval.semantic import DEFAULT_R
from vltools.infer import checks
from vltools.infer.settings import FEATURE_DTYPES, ROLES, QueryOptions
from vltools.io import coco
from vltools.io.embeddings import read_embeddings
from vltools.io.held import Embeddings, held, in_memory, instance_of
from vltools.io.kinds import IN_MEMORY, Placed, refuse_swaps, refuse_wrong_kinds, sniff
from vltools.io.lock import output_lock
from vltools.io.model_store import resolve_models
from vltools.io.output import is_stdout
from vltools.io.records import write_records
from vltools.io.sims import Sims
from vltools.io.spooled import spooled
from vltools.stages.caption import caption as stage_caption
from vltools.stages.encode import encode as stage_encode
from vltools.stages.extract_regions import extract_regions
from vltools.stages.match import match as stage_match
from vltools.stages.match import model_items
from vltools.training import TASKS, check_inputs

if TYPE_CHECKING:
    from vltools.infer.loader import LoadedModel
    from vltools.infer.match import Matches

# No torch at import, nor before a function has checked its arguments: the library each function runs (the
# inference and training modules, the report writer, the converters) is imported in its body once they are checked,
# so that a refused call answers at once (tests/test_api.py asserts it in a fresh process).
LOADER, MATCH = "vltools.infer.loader", "vltools.infer.match"     # LoadedModel's and Matches' modules

PathLike = str | os.PathLike
Records = Sequence[dict] | dict     # records in memory, read as the file they would be (vltools.io.spooled)
Features = dict                     # {"ids": [...], "regions": array, ...}: a features file in memory
ModelLike = "PathLike | LoadedModel | Sequence[PathLike | LoadedModel]"

__all__ = ["Embeddings", "Matches", "caption", "convert", "encode", "extract_regions", "load_model", "match", "report",
           "score_caption", "score_retrieval", "score_self_retrieval", "score_semantic", "search", "train"]

Check = Callable[[object, str], object]    # a validator of vltools.infer.checks: (value, argument name)


def _optional(check: Check) -> Check:
    """`check`, letting None through (an argument the converter can go without)."""
    return lambda value, name: None if value is None else check(value, name)


def _one_of(choices: Sequence[object]) -> Check:
    """`checks.choice` among `choices`."""
    return lambda value, name: checks.choice(value, name, choices)


def _positive(value: object, name: str) -> int:
    """A positive integer."""
    return checks.integer(value, name, 1)


def _fields(value: object, name: str) -> str | tuple[str, ...]:
    """Column names: a list of strings, or one string (comma-separated for bottom-up's `fields`, as `--fields`
    takes them)."""
    return checks.text(value, name) if isinstance(value, str) else checks.texts(value, name)


def _split_files(value: object, name: str) -> object:
    """Split lists as {split: file} or (split, file) pairs (the converter refuses a split named twice)."""
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list | tuple) or not all(isinstance(pair, list | tuple) and len(pair) == 2
                                                      for pair in pairs):
        raise checks.ArgumentError(name, f"must be a dict {{split: file}} or a list of (split, file) pairs, not "
                                         f"{shown(value)}")
    for split, path in pairs:
        checks.split(split, name)
        checks.path(path, name)
    return value


@dataclass(frozen=True)
class Converter:
    """One kind of `vltools convert` as the library function its command calls: `target` ("module:function",
    imported when it runs, once its arguments are checked: some load torch) takes the source first, then the
    keywords `options` checks (each one given, and each one in `required`, so that a missing one is named; a test
    keeps `required` the function's keywords without a default). `records`: the function returns records, which
    `convert` writes when given an output; `output`: the function's parameter that the API's `output` fills
    (neither: it takes its outputs as keywords, named in `outputs`). `sources`: the source is one or more paths.
    `memory`: the arguments ("source" or an option) that may be data in memory, and of which kinds (see
    `vltools.io.held.held`)."""

    target: str
    options: dict[str, Check] = field(default_factory=dict)
    records: bool = False
    output: str | None = None
    outputs: tuple[str, ...] = ()
    sources: bool = False
    memory: dict[str, tuple[str, ...]] = field(default_factory=dict)
    required: tuple[str, ...] = ()

    @property
    def function(self) -> Callable[..., list[dict] | dict[str, object]]:
        """The library function, imported."""
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


def _records(value: object, name: str) -> object:
    """A file path, or records in memory (a non-empty list of dicts)."""
    return checks.data(value, name, ("records",))


FORMATS = "vltools.data.converters"    # the converters' package
# every kind of `vltools convert`; the first six and visual-genome return records, the rest write files
CONVERTERS: dict[str, Converter] = {
    "karpathy": Converter(f"{FORMATS}.karpathy:read_karpathy", {
        "id_field": _one_of(karpathy.ID_FIELDS), "text_field": _one_of(karpathy.TEXT_FIELDS),
        "restval_as": _optional(checks.split), "only_splits": _optional(checks.splits)}, records=True),
    "coco": Converter("vltools.io.coco:read_coco", {"split": _optional(checks.split),
                                                    "id_field": _one_of(coco.ID_FIELDS)}, records=True),
    "flickr": Converter(f"{FORMATS}.flickr:convert_flickr", {
        "train": _optional(checks.path), "val": _optional(checks.path), "test": _optional(checks.path),
        "drop_unassigned": checks.flag}, records=True),
    "birds-to-words": Converter(f"{FORMATS}.birds_to_words:read_birds_to_words",
                                {"image_names": _one_of(birds_to_words.IMAGE_NAMES)}, records=True),
    "cub": Converter(f"{FORMATS}.cub:read_cub", {"split_files": _optional(_split_files),
                                                 "drop_unassigned": checks.flag}, records=True),
    "webdataset": Converter(f"{FORMATS}.webdataset:read_webdataset", {"split": _optional(checks.split),
                                                                      "strict": checks.flag},
                            records=True, sources=True),
    "visual-genome": Converter(f"{FORMATS}.visual_genome:visual_genome_records", {
        "image_data": _optional(checks.path), "splits": _optional(checks.path), "clip_boxes": checks.flag,
        "drop_unassigned": checks.flag}, records=True),
    "precomp": Converter(f"{FORMATS}.precomp:convert_precomp", {
        "split": checks.split, "features": _optional(checks.path), "captions": _optional(checks.path),
        "ids_file": _optional(checks.path), "captions_per_image": _optional(_positive),
        "dtype": _one_of(FEATURE_DTYPES)}, outputs=("features", "captions"), required=("split",)),
    "to-precomp": Converter(f"{FORMATS}.precomp:write_precomp", {
        "captions": _records, "split": checks.split, "field": _optional(_one_of(precomp.EXPORT_FIELDS))},
        output="out_dir", memory={"source": ("features",), "captions": ("records",)},
        required=("captions", "split")),
    "to-coco-results": Converter("vltools.io.coco:write_coco_results", output="output",
                                 memory={"source": ("records",)}),
    "bottom-up": Converter(f"{FORMATS}.bottom_up:convert_bottom_up", {
        "fields": _fields, "max_regions": _optional(_positive), "dtype": _one_of(FEATURE_DTYPES)}, output="output",
        sources=True),
    "hf": Converter(f"{FORMATS}.hf:convert_hf", {
        "image_column": _fields, "caption_column": _optional(checks.text), "id_column": _optional(checks.text),
        "split_column": _optional(checks.text), "image_root": _optional(checks.path), "force": checks.flag},
        output="output"),
    "scan-vocab": Converter(f"{FORMATS}.scan_vocab:convert_scan_vocab", output="output"),
    "to-scan-vocab": Converter(f"{FORMATS}.scan_vocab:convert_to_scan_vocab", output="output"),
    "sgraf-checkpoint": Converter(f"{FORMATS}.sgraf_checkpoint:convert_sgraf_checkpoint",
                                  {"vocab": checks.path, "trust": checks.flag}, output="output", required=("vocab",)),
    "bottom-up-weights": Converter(f"{FORMATS}.bottom_up_weights:save_bottom_up_checkpoint", {"trust": checks.flag},
                                   output="output"),
}


def _keywords(*functions: Callable) -> set[str]:
    """The keywords `functions` take, each by its own parameters (an option dataclass: its fields), for
    `checks.known`, which suggests the nearest one to a misspelt keyword."""
    return {name for function in functions for name, parameter in inspect.signature(function).parameters.items()
            if parameter.kind is not parameter.VAR_KEYWORD}


API = TypeVar("API", bound=Callable[..., object])


def _known_keywords(*passed: Callable) -> Callable[[API], API]:
    """Make an API function answer a keyword it does not take, neither its own nor one of the functions its
    `**options` are `passed` to, as `checks.known` does (one VLToolsError naming it, with the nearest as a hint)
    before any work, not as Python's TypeError. `convert` (whose options are its kind's) and `extract_regions` (the
    stage's own function) check theirs themselves."""

    def decorate(function: API) -> API:
        accepted = _keywords(function, *passed)

        @functools.wraps(function)
        def checked(*args: object, **keywords: object) -> object:
            checks.known(keywords, accepted, function.__name__)
            return function(*args, **keywords)

        return cast(API, checked)

    return decorate


@_known_keywords()
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
    from vltools.infer.loader import load_model as load_checkpoint_model

    return load_checkpoint_model(paths[0], role)


def _found(name: str, value: object) -> tuple[str, str]:
    """An input as messages name it and its kind (a key of vltools.io.kinds.FOUND): a file by its first bytes, data
    in memory by what it holds (records, features, ...: vltools.io.kinds.IN_MEMORY says which file each stands
    for)."""
    kind = held(value)
    return (os.fspath(value), sniff(value, folder_ok=True)) if kind is None else (f"{name} (in memory)", kind)


def _is_file(value: object) -> bool:
    """Whether `value` is a usable path (`checks.path`) to a regular file."""
    try:
        return checks.path(value, "value") is not None and Path(value).is_file()
    except (checks.ArgumentError, OSError):
        return False


def _check_kinds(function: str, inputs: dict[str, tuple[object, tuple[str, ...]]]) -> None:
    """Refuse at once, as the command line does, two arguments given in each other's places, files or data in
    memory (`vltools.match(caps, feats)` said only that `first` must be features), and then a file of another kind
    than its argument takes (keys of vltools.io.kinds.TAKES): `vltools.match("caps.jsonl", "feats.h5")` called the
    captions a truncated HDF5 file once the model had loaded. The first check of each function that takes data, so
    that a swap is named before either argument is refused alone; data in memory of a kind its argument does not
    take is then refused by the argument's own check (`checks.data`), which says what it takes in memory. Left to
    the arguments' own checks: None, a missing path, a folder, a model-store name and a loaded model."""
    placed = []
    for label, (value, takes) in inputs.items():
        if held(value) is not None or _is_file(value):
            shown, kind = _found(label, value)
            placed.append(Placed(shown, label, takes, kind))
    refuse_swaps(placed)
    refuse_wrong_kinds([item for item in placed if item.found not in IN_MEMORY], f"see help(vltools.{function})")


def _models(model: object) -> dict[str, tuple[object, tuple[str, ...]]]:
    """`model` (one or a list) as `_check_kinds` inputs: model, or model[k] for each of a list."""
    if not isinstance(model, list | tuple) or len(model) == 1:
        return {"model": (model[0] if isinstance(model, list | tuple) else model, ("checkpoint",))}
    return {f"model[{k}]": (item, ("checkpoint",)) for k, item in enumerate(model)}


@_known_keywords(stage_match)
def match(first: PathLike | Features | Embeddings, second: PathLike | Records | Embeddings | None = None,
          model: ModelLike = (), **options: object) -> Matches | None:
    """`vltools match FIRST SECOND [--model ...]`: features + captions with a model (a checkpoint, a store name
    such as "sgraf", loaded models, or a list: their mean), two sims files, or two embeddings files. Features may
    be given in memory ({"ids": [...], "regions": array, ...}: the datasets of a features file, numpy arrays or
    tensors), captions as records (a list of {"image_id", "caption", "split"} dicts) and embeddings as the
    `Embeddings` `encode` returns; each is read as its file would be, with the same checks. Returns a
    `Matches`: `.sims` (the full matrix, unless reranking or writing only the rankings), `.row_ids`,
    `.column_ids`, `.forward` / `.backward` (top-k scores and indices) and `.rankings()` (the records `match -o`
    writes). The keyword options are the command's (`vltools.stages.match.match`): split, top_k, output (the
    rankings JSONL), sims (the matrix HDF5), resume, rerank_k, first_stage, index, index_file, nprobe, block_images,
    block_captions, image_cache_mb, precision, device, checkpoint_seconds. Under torchrun the first process gets
    the `Matches`, the others None."""
    _check_kinds("match", {"first": (first, ("hdf5",)), "second": (second, ("jsonl", "hdf5")), **_models(model),
                           "first_stage": (options.get("first_stage"), ("checkpoint",))})
    checks.data(first, "first", ("features", "embeddings"))
    checks.data(second, "second", ("records", "embeddings"), optional=True)
    items = model_items(model, "model")
    with spooled({"first": first, "second": second}, features_in_memory=True) as files:
        return stage_match(files["first"], files["second"], items, **options)


@_known_keywords()
def search(queries: PathLike | Sequence[PathLike] | Embeddings, index_file: PathLike | Embeddings, top_k: int = 10,
           nprobe: int = 16, *, model: PathLike | LoadedModel | None = None, batch_size: int = 256,
           device: str = "auto", precision: str = "fp32") -> Matches:
    """Without `model`, `vltools match QUERIES --index-file INDEX`: the top-k rows of a saved index (`vltools
    index`) for every query of an embeddings file encoded by the same checkpoint, without rebuilding it. With
    `model`, `vltools search INDEX --model MODEL --query ...`: `queries` are texts (a string or a list; a vse or sco
    model) or image files and folders (an rmac model), encoded by `model`, which must be the checkpoint that
    encoded INDEX, a saved index or an image embeddings file (`vltools encode`), e.g.
    search(["a red cube", "two dogs"], "images.index.h5", model="vse.pt"). Returns a `Matches` whose `.forward`
    holds (scores, row indices) and `.rankings()` the records; `nprobe`: IVF lists visited. Embeddings files may
    be given in memory, as the `Embeddings` `encode` returns."""
    checks.data(index_file, "index_file", ("embeddings",))
    checks.device(device, "device")
    checks.integer(top_k, "top_k", 1)
    checks.integer(nprobe, "nprobe", 1)
    checks.choice(precision, "precision", PRECISIONS)
    if model is None:
        if isinstance(queries, list | tuple):
            raise checks.ArgumentError("queries", f"is a list ({shown(queries)}): query texts and images are "
                                                  "encoded by model=CHECKPOINT, the one that encoded index_file")
        checks.data(queries, "queries", ("embeddings",))
        from vltools.infer.match import Search, match_index  # torch: once every argument is checked

        with spooled({"queries": queries, "index_file": index_file}) as files:
            return match_index(files["queries"], files["index_file"],
                               Search(top_k=top_k, nprobe=nprobe, device=resolve_device(device), precision=precision))
    given = checks.queries(queries, "queries")
    loaded_given = instance_of(model, LOADER, "LoadedModel")
    if not loaded_given:
        checks.path(model, "model")
    checks.integer(batch_size, "batch_size", 1)
    _check_kinds("search", {"index_file": (index_file, ("hdf5",)), "model": (model, ("checkpoint",))})
    from vltools.infer.match import Search
    from vltools.infer.query import checked_queries, search_queries

    given = checked_queries(given)
    options = Search(top_k=top_k, nprobe=nprobe, device=resolve_device(device), precision=precision)
    loaded = model if loaded_given else load_model(model, "encodable")
    with spooled({"index_file": index_file}) as files:
        return search_queries(loaded, given, files["index_file"], options, batch_size)


@_known_keywords()
def score_retrieval(scores: Matches | PathLike | Sequence[PathLike] | Records,
                    captions: PathLike | Records | None = None, *, protocol: str = "full", fold_size: int = 1000,
                    split: str | None = None) -> dict:
    """`vltools score retrieval`: R@1/5/10 both ways, medr, meanr, rsum and mR of a `Matches` with its full
    matrix, or of files (sims HDF5 / .npy matrices, averaged when several, or one rankings JSONL with
    `captions`); rankings and captions may be records in memory too (lists of dicts, as `.rankings()` and
    `vltools.convert` give them)."""
    if captions is not None:
        checks.records(captions, "captions")
    checks.choice(protocol, "protocol", PROTOCOLS)
    checks.integer(fold_size, "fold_size", 1)
    checks.split(split, "split", optional=True)
    if instance_of(scores, MATCH, "Matches"):
        if scores.sims is None or scores.caption_image_ids is None:
            raise VLToolsError("these matches have no full similarity matrix with each caption's image (reranked, "
                               "or images ranked for images); score the rankings written by match -o instead")
        from vltools.data.retrieval import sims_scores, summary  # torch: once every argument is checked

        sims = Sims(scores.sims, scores.row_ids, scores.column_ids, scores.caption_image_ids)
        return summary(sims_scores(sims, "matches", protocol, fold_size), protocol, fold_size)
    ranked = isinstance(scores, list | tuple) and in_memory(scores)    # rankings records (a dict is no scores)
    also = "a Matches, rankings records (a list of dicts, as Matches.rankings() gives), "
    from vltools.data.retrieval import score_retrieval as score_files

    with spooled({"scores": scores if ranked else checks.paths(scores, "scores", also),
                  "captions": captions}) as files:
        scores = files["scores"]
        return score_files(scores if isinstance(scores, list) else [scores], files["captions"], protocol, fold_size,
                           split)


@_known_keywords(stage_caption)
def caption(model: PathLike | LoadedModel, features: PathLike | Features, captions: PathLike | Records | None = None,
            output: PathLike | None = None, *, split: str | None = None, beam: int = 3, max_len: int | None = None,
            length_penalty: float = 0.0, batch_size: int = 50, device: str = "auto", precision: str = "fp32",
            **options: object) -> list[dict] | None:
    """`vltools caption --model MODEL FEATURES [CAPTIONS] [-o OUTPUT]`: one {"image_id", "caption"} per image of
    FEATURES (or of the `split` of CAPTIONS, in first-mention order) by beam search (`beam` 1: greedy), written
    as JSONL to `output` when given, refused as the command refuses it (every caption empty). FEATURES may be in
    memory ({"ids": [...], "regions": array, ...}) and CAPTIONS records (a list of dicts), read as their files
    would be. Further keyword options are those of the command (`vltools.stages.caption.caption`): sample,
    temperature, seed, pairs, logp, block_images, block_captions, resume, checkpoint_seconds, shard."""
    _check_kinds("caption", {"model": (model, ("checkpoint",)), "features": (features, ("hdf5",)),
                             "captions": (captions, ("jsonl",))})
    checks.data(features, "features", ("features",))
    checks.data(captions, "captions", ("records",), optional=True)
    with spooled({"features": features, "captions": captions}) as files:
        return stage_caption(model, files["features"], files["captions"], output, split=split, beam=beam,
                             max_len=max_len, length_penalty=length_penalty, batch_size=batch_size, device=device,
                             precision=precision, **options)


@_known_keywords()
def score_caption(predictions: PathLike | Records, refs: PathLike | Records, *, tokenized: bool = False,
                  spice: bool = True, meteor: bool = True, strict: bool = False) -> dict[str, float]:
    """`vltools score caption PREDICTIONS --refs REFS`: BLEU-1..4, METEOR, ROUGE-L, CIDEr-D (and SPICE when its
    models are installed) of one caption per image or pair, as the COCO evaluation server computes them (needs
    Java). Each is a file (captions or pairs JSONL, COCO JSON) or records in memory: a list of {"image_id" (or
    "pair_id"), "caption"} dicts such as `vltools.caption` and `vltools.convert` return, or a COCO annotations
    dict. `tokenized`: REFS are already PTB-tokenised; `strict`: refuse empty references of predicted ids."""
    _check_kinds("score_caption", {"predictions": (predictions, ("jsonl", "json")), "refs": (refs, ("jsonl", "json"))})
    checks.records(predictions, "predictions")
    checks.records(refs, "refs")
    for value, name in ((tokenized, "tokenized"), (spice, "spice"), (meteor, "meteor"), (strict, "strict")):
        checks.flag(value, name)
    with spooled({"predictions": predictions, "refs": refs}) as files:
        return score_caption_files(files["predictions"], files["refs"], tokenized, spice, meteor, strict)[0].metrics


@_known_keywords()
def score_semantic(model: PathLike | Records | Matches, proxy: PathLike | None = None,
                   triplets: PathLike | Records | None = None, *, r_values: Sequence[int] = DEFAULT_R,
                   split: str = "test", queries: int | None = None, plot: PathLike | None = None) -> dict:
    """`vltools score semantic MODEL`: NDCG@R, PCC@R and their AUC against a `proxy` (tfidf-proxy), and the user
    agreement with user-study `triplets`, of image-to-image similarities (a sims file, i2i rankings, or a proxy
    file ranking the first `queries` images of `split`: the text oracle); `plot`: draw the curves to a PNG.
    MODEL may be i2i rankings in memory (a `Matches` of two image embeddings, or its `.rankings()` records) and
    `triplets` records (a list of dicts), read as their files would be."""
    model = _ranked(model)
    checks.data(model, "model", ("records",))
    checks.path(proxy, "proxy", optional=True)
    checks.data(triplets, "triplets", ("records",), optional=True)
    r_values = checks.integers(r_values, "r_values", 1)
    checks.split(split, "split")
    checks.optional_integer(queries, "queries", 1)
    checks.path(plot, "plot", optional=True)
    with spooled({"model": model, "triplets": triplets}) as files:
        return score_semantic_file(files["model"], proxy, files["triplets"], r_values, split, queries, plot)[0]


@_known_keywords()
def score_self_retrieval(logp: PathLike, ks: Sequence[int] = SELF_RETRIEVAL_KS) -> dict:
    """`vltools score self-retrieval LOGP`: top-K recall of each generated caption's own image ranked by
    log p(c | I) (Dai & Lin 4.1), medr and meanr, from a `caption --logp` file."""
    checks.path(logp, "logp")
    return score_self_retrieval_file(logp, checks.integers(ks, "ks", 1, empty=False))


@_known_keywords(stage_encode, QueryOptions)
def encode(source: PathLike | Sequence[PathLike] | Records | Features, model: PathLike | LoadedModel,
           output: PathLike | None = None, *,
           split: str | None = None, captions: PathLike | Records | None = None, concepts: PathLike | None = None,
           sentences: PathLike | Records | None = None, **options: object) -> Embeddings | None:
    """`vltools encode SOURCE --model MODEL [-o OUTPUT]`: the embeddings of a separable model (vse, sco; rmac on
    images) for the images of a features file (those the `split` of `captions` names, when given) or the captions
    of a captions file's `split`, written to `output` when given (the HDF5 of `/ids` and `/emb`). An OpenCLIP
    model, `model="openclip:ARCH[:PRETRAINED_OR_FILE]"` (e.g. "openclip:ViT-B-32"), embeds the images of images
    inputs (a folder, image files, a tar, a list; one or a list of them) or captions (a file or records), as
    open_clip's own encode_image(preprocess(image)) / encode_text(tokenizer(texts)) do, l2-normalised. Returns them as
    `Embeddings`: `.ids`, `.vectors` (a numpy array, one row per id), `.side`, `.caption_image_ids`, `.attrs` (the
    model and its digest), which `match` and `search` take as they take the file; under torchrun the first process
    gets them, the others None. SOURCE, `captions` and `sentences` may be in memory: records (a list of dicts)
    or features ({"ids": [...], "regions": array, ...}). SCO reads `concepts` (concept scores) and, for "ctx +
    sen", `sentences` (one generated caption per image). An rmac model takes the keywords of
    `vltools.infer.rmac.QueryOptions` (proxy, first, with_text, add, subtract, image_size, workers). The other
    keyword options are the command's (`vltools.stages.encode.encode`): batch_size, device, precision, resume (an
    interrupted run continued into the same `output`), checkpoint_seconds."""
    _check_kinds("encode", {"source": (source, ("hdf5", "jsonl", "images")), "model": (model, ("checkpoint",)),
                            "captions": (captions, ("jsonl",)), "concepts": (concepts, ("hdf5",)),
                            "sentences": (sentences, ("jsonl",))})
    if isinstance(source, list | tuple) and source and all(isinstance(item, str | os.PathLike) for item in source):
        checks.paths(source, "source")   # several images inputs (rmac, OpenCLIP)
    else:
        checks.data(source, "source", ("records", "features"))
    if not instance_of(model, LOADER, "LoadedModel"):
        checks.path(model, "model")
    checks.data(captions, "captions", ("records",), optional=True)
    checks.data(sentences, "sentences", ("records",), optional=True)
    # a resumed run keeps the rows whose input files are unchanged: features in memory, which have no file to
    # compare, then go to a new temporary file each run, as records always do, so their rows are computed again
    with spooled({"source": source, "captions": captions, "sentences": sentences},
                 features_in_memory=not options.get("resume", False)) as files:
        found = stage_encode(files["source"], model, output, split=split, captions=files["captions"],
                             concepts=concepts, sentences=files["sentences"], **options)
    return found if output is None or is_stdout(output) or not place().main else read_embeddings(output)


def _ranked(value: object) -> object:
    """A `Matches` as its rankings records (the file `match -o` writes), anything else as it is."""
    return value.rankings() if instance_of(value, MATCH, "Matches") else value


def _flat(config: object, name: str) -> dict[str, object]:
    """A config of sections ({"train": {"epochs": 2}}) or of `--set` keys ({"train.epochs": 2, "lr": 1e-4}) as
    {key: value} for the config builder, which checks each key and value."""
    if config is None:
        return {}
    if not isinstance(config, dict) or not all(isinstance(key, str) and key for key in config):
        raise checks.ArgumentError(name, f"must be a dict of config sections or KEY: value, not {shown(config)}")
    flat: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": item for inner, item in _flat(value, name).items()})
        else:
            flat[key] = value
    return flat


@_known_keywords()
def train(model: str, inputs: PathLike | Records | Features | Sequence[PathLike | Records | Features],
          output: PathLike, *,
          config: PathLike | dict | None = None, set: dict | None = None,  # noqa: A002
          resume: bool = False, vocab: PathLike | None = None, train_split: str = "train",
          val_split: str = "val") -> dict:
    """`vltools train --model MODEL INPUTS -o OUTPUT`: train with the shared loop and keep the best checkpoint at
    OUTPUT (OUTPUT.last.pt and OUTPUT.log.jsonl beside it); returns the summary (epoch, iteration, best). INPUTS
    (features and captions) may be in memory too: features ({"ids": [...], "regions": array, ...}) and records
    (a list of caption dicts), read as their files would be.
    `config`: a YAML file or a dict of sections ({"train": {"epochs": 2}, "model": {"embed_size": 64}});
    `set`: the command line's `--set` keys over it ({"train.lr": 1e-4, "embed_size": 64})."""
    checks.choice(model, "model", sorted(TASKS))
    given = _inputs(inputs, "inputs", ("records", "features"), empty=False)
    checks.training_output(output, "output")
    config_file = None if isinstance(config, dict | type(None)) else checks.path(config, "config")
    options = {**_flat(config if isinstance(config, dict) else None, "config"), **_flat(set, "set")}
    checks.flag(resume, "resume")
    checks.path(vocab, "vocab", optional=True)
    checks.split(train_split, "train_split")
    checks.split(val_split, "val_split")
    from vltools.training.trainer import run_training, training_config  # torch: the config's check needs it

    built = training_config(model, config_file, (), options)
    check_inputs(model, [_found(name, value) for name, value in given.items()])
    with output_lock(output), spooled(given) as files:
        return run_training(model, list(files.values()), output, built, resume, vocab, train_split, val_split)


def convert(kind: str, source: PathLike | Sequence[PathLike], output: PathLike | None = None,
            **options: object) -> list[dict] | dict[str, object]:
    """`vltools convert KIND SOURCE -o OUTPUT`, every kind, through the library function its command calls
    (`vltools.api.CONVERTERS`); `options` are that function's keywords (the command's options by their Python
    names). The record formats (karpathy, coco, flickr, visual-genome, birds-to-words, cub, webdataset: SOURCE a
    list of shards) return the records and write them as JSONL to `output` when given, e.g.
    convert("karpathy", "dataset_coco.json", id_field="cocoid"). The file formats write `output` (to-precomp: the
    folder; precomp: `features` and / or `captions` instead) and return what they wrote, e.g.
    convert("precomp", "f30k_precomp", split="test", features="f.h5", captions="c.jsonl") gives
    {"images": 1000, "captions": 5000}; hf writes the folder `output` (images/, images.jsonl, captions.jsonl) from
    a Hugging Face dataset, e.g. convert("hf", "coco-karpathy/", "coco", image_root="coco2014/") (columns detected,
    or named: image_column, caption_column, id_column, split_column; force=True replaces an earlier one);
    bottom-up (SOURCE: TSV files or one .npz folder), scan-vocab,
    to-scan-vocab, to-coco-results, sgraf-checkpoint (vocab=, trust=) and bottom-up-weights (trust=) too.
    to-coco-results takes captions records in memory as SOURCE, and to-precomp features in memory ({"ids": [...],
    "regions": array}) as SOURCE and records as `captions`."""
    checks.choice(kind, "kind", CONVERTERS)
    converter = CONVERTERS[kind]
    if "source" in converter.memory:
        checks.data(source, "source", converter.memory["source"])
    else:
        source = checks.paths(source, "source") if converter.sources else checks.path(source, "source")
    if converter.records or converter.output:
        checks.path(output, "output", optional=converter.records)
    elif output is not None:
        raise checks.ArgumentError("output", f"is not taken by {kind}, which names its outputs by keyword "
                                             "(see help(vltools.convert))")
    checks.known(options, converter.options, "convert")
    for name, check in converter.options.items():
        if name in options or name in converter.required:
            check(options.get(name), name)
    if converter.output:
        options[converter.output] = output
    given = {"source": source, **options}
    outputs = [output, *(options.get(name) for name in converter.outputs)]
    with output_lock(*outputs), spooled({name: given[name] for name in converter.memory if name in given}) as files:
        given.update(files)
        written = converter.function(given.pop("source"), **given)
        if converter.records and output is not None:
            write_records(output, written)
    return written


def _path_list(value: object, name: str) -> list[str]:
    """An optional list of paths (a report's repeatable inputs: empty, one path, or a list) as strings."""
    return [] if isinstance(value, list | tuple) and not value else list(map(os.fspath, checks.paths(value, name)))


def _optional_path(value: object, name: str) -> str | None:
    """None, or a path as a string (the report's files are named in its pages)."""
    return None if checks.path(value, name, optional=True) is None else os.fspath(value)


def _inputs(value: object, name: str, kinds: Sequence[str], empty: bool = True) -> dict[str, object]:
    """A repeatable input (one path or data in memory of `kinds`, or a list of them; nothing when `empty`) as
    {its name in messages: the value}, each checked; a `Matches` stands for its rankings records."""
    value = _ranked(value)
    if held(value) in kinds or isinstance(value, str | os.PathLike):
        return {name: checks.data(value, name, kinds)}
    if not isinstance(value, list | tuple) or not (value or empty):
        return {name: checks.data(value, name, kinds)}    # refused: what the argument takes
    return {f"{name}[{k}]": checks.data(_ranked(item), name, kinds) for k, item in enumerate(value)}


@_known_keywords()
def report(out: PathLike, *, rankings: PathLike | Records | Matches | Sequence[PathLike | Records | Matches] = (),
           generated: PathLike | Records | Sequence[PathLike | Records] = (),
           item_scores: PathLike | Records | Sequence[PathLike | Records] = (),
           images: PathLike | Sequence[PathLike] = (), captions: PathLike | Records | None = None,
           pairs: PathLike | Records | None = None, scores: PathLike | dict | Sequence[PathLike | dict] = (),
           proxy: PathLike | None = None, heatmaps: PathLike | None = None,
           logs: PathLike | Records | Sequence[PathLike | Records] = (), figures: PathLike | Sequence[PathLike] = (),
           boxes: PathLike | Features | None = None, queries: str | None = None, sample: int = 100, seed: int = 0,
           top_k: int = 5, page_size: int = 50, thumb_size: int = 160, title: str = "vltools report",
           force: bool = False, max_boxes: int = 10) -> dict[str, int]:
    """`vltools report OUT`: the static HTML report folder OUT (open OUT/index.html) of rankings, generated
    captions (with their per-item scores), metrics, training logs and figures, with thumbnails of `images`;
    returns the counts of cards, thumbnails and broken images. Each input may be in memory as well as a file (or
    a list of them where several are taken): rankings as a `Matches` or its `.rankings()`, the JSONL inputs as
    records (lists of dicts), `scores` as the dicts the scorers return, `boxes` as features ({"ids": [...],
    "boxes": array, ...}); the report names one by its argument (rankings[1].jsonl)."""
    checks.path(out, "out")
    records = ("records",)
    given = {"rankings": _inputs(rankings, "rankings", records), "generated": _inputs(generated, "generated", records),
             "item_scores": _inputs(item_scores, "item_scores", records),
             "scores": _inputs(scores, "scores", ("document",)), "logs": _inputs(logs, "logs", records),
             "captions": {"captions": checks.data(captions, "captions", records, optional=True)},
             "pairs": {"pairs": checks.data(pairs, "pairs", records, optional=True)},
             "boxes": {"boxes": checks.data(boxes, "boxes", ("features",), optional=True)}}
    shown_images, shown_figures = _path_list(images, "images"), _path_list(figures, "figures")
    proxy, heatmaps = _optional_path(proxy, "proxy"), _optional_path(heatmaps, "heatmaps")
    checks.text(queries, "queries", optional=True)
    checks.integer(sample, "sample", 0)
    checks.integer(seed, "seed", 0, checks.MAX_SEED)
    checks.integer(top_k, "top_k", 1)
    checks.integer(page_size, "page_size", 1)
    checks.integer(thumb_size, "thumb_size", 16)
    checks.text(title, "title")
    checks.flag(force, "force")
    checks.integer(max_boxes, "max_boxes", 1)
    from vltools.reporting.site import ReportInputs  # torch: once every argument is checked
    from vltools.reporting.site import build_report as write_report_folder

    with output_lock(out), spooled({key: value for group in given.values() for key, value in group.items()}) as files:
        named = {group: [os.fspath(files[key]) for key in keys if files[key] is not None]
                 for group, keys in given.items()}
        single = {group: (named[group] or [None])[0] for group in ("captions", "pairs", "boxes")}
        inputs = ReportInputs(named["rankings"], named["generated"], named["item_scores"], shown_images,
                              single["captions"], single["pairs"], named["scores"], proxy, heatmaps, named["logs"],
                              shown_figures, single["boxes"])
        return write_report_folder(out, inputs, queries, sample, seed, top_k, page_size, thumb_size, title, force,
                                   max_boxes)
