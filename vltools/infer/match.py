"""What `match` computes, for the command and the Python API alike: ranked lists both ways (and the full matrix
when every pair was scored) from one of four inputs.

- region features + captions + matching models (cross-attention or separable; an ensemble averages them; with
  a separable first stage, two-stage search that scores only its K candidates);
- two sims files of earlier runs (ranked by their mean: SGRAF from the saved SGR and SAF matrices);
- image and caption embeddings of one separable model (`encode`);
- two image embeddings files (queries, database): images ranked for images, each query left out of its own list;
- images and captions with an OpenCLIP model (zero-shot; it is also a first stage for reranking, from the images).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.data.captions import CaptionSplit, check_images, read_split
from vltools.errors import VLToolsError, argument
from vltools.infer.embed import full_sims, require_separable
from vltools.infer.index import (
    SavedIndex,
    check_model,
    check_source,
    load_index,
    matched_rows,
    positions,
    search_embeddings,
)
from vltools.infer.loader import LoadedModel, OpenClipModel, check_features, no_model
from vltools.infer.openclip import named_image_embeddings, text_embeddings
from vltools.infer.rerank import FirstStage, rerank
from vltools.infer.runner import check_output, computed_rows, finite_results, refuse_nonfinite_results
from vltools.infer.settings import COMMIT_SECONDS, check_search
from vltools.infer.similarity import similarity_columns
from vltools.infer.topk import EXACT, drop_self, search, topk_rows
from vltools.io.checkpoint import Rows
from vltools.io.embeddings import EmbeddingsFile, check_same_model, open_embeddings
from vltools.io.features import FeaturesReader
from vltools.io.hdf5 import hdf5_kind
from vltools.io.provenance import ids_digest, input_digest
from vltools.io.records import ranking_records
from vltools.io.shards import Part
from vltools.io.sims import average_sims, read_sims
from vltools.text.vocab import Coverage

PathLike = str | os.PathLike
# what the rows and the columns of a Matches are, by its direction (i2t: images x captions)
# a caption's similarities to every image, as a checkpoint keeps them
SIMILARITIES = Rows("float32", id_kind="caption id",
                    fix="check the models' weights, or match in fp32 (--precision fp32)")
SIDES = {"i2t": ("images", "captions"), "t2i": ("captions", "images"), "i2i": ("query images", "images")}


@dataclass
class Search:
    """How to search: results kept per query, device, precision, block sizes, cache, index (separable inputs):
    a FAISS factory string to build in memory, or `index_file`, a saved index (`vltools index`); how often the
    scored captions are made durable for --resume (`checkpoint_seconds`)."""

    top_k: int = 10
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    precision: str = "fp32"
    block_images: int = 128
    block_captions: int = 512
    image_cache_mb: float = 2048.0
    index: str = EXACT
    nprobe: int = 16
    index_file: PathLike | None = None
    checkpoint_seconds: float = COMMIT_SECONDS

    def __post_init__(self) -> None:
        """Each option's type and range, as the command line's option types check them (vltools.infer.checks)."""
        check_search(self.top_k, self.precision, self.block_images, self.block_captions, self.image_cache_mb,
                     self.index, self.nprobe, self.checkpoint_seconds)


@dataclass
class Matches:
    """Top-k lists of each row id among the column ids (i2t, or i2i for two image sets) and of each column among
    the rows (t2i; None for i2i); `sims` is the full rows x columns matrix when every pair was scored."""

    row_ids: list[str]
    column_ids: list[str]
    forward: tuple[np.ndarray, np.ndarray]
    backward: tuple[np.ndarray, np.ndarray] | None
    sims: np.ndarray | None = None
    caption_image_ids: list[str] | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    direction: str = "i2t"

    def __repr__(self) -> str:
        """Sizes and ids counts, not arrays: `Matches(i2t, 7 images x 21 captions, top 10, sims 7 x 21)`."""
        rows, columns = SIDES[self.direction]
        sims = "no sims" if self.sims is None else f"sims {' x '.join(map(str, self.sims.shape))}"
        return (f"Matches({self.direction}{'' if self.backward is None else ' + t2i'}, {len(self.row_ids)} {rows} x "
                f"{len(self.column_ids)} {columns}, top {self.forward[1].shape[-1]}, {sims})")

    def rankings(self) -> list[dict]:
        """Rankings records (the rankings JSONL kind): every row's list, then every column's. A list, so that it is
        records in memory wherever the API takes a rankings file (`score_retrieval`, `report`, ...)."""
        records = list(ranking_records(self.row_ids, self.column_ids, *self.forward, self.direction))
        if self.backward is not None:
            records += ranking_records(self.column_ids, self.row_ids, *self.backward, "t2i")
        return records


def _topk_both(sims: torch.Tensor, top_k: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    (i2t_values, i2t_indices), (t2i_values, t2i_indices) = topk_rows(sims, top_k), topk_rows(sims.T, top_k)
    return (i2t_values.numpy(), i2t_indices.numpy()), (t2i_values.numpy(), t2i_indices.numpy())


def match_features(features: PathLike, captions: PathLike, models: Sequence[LoadedModel], split: str | None = None,
                   search_options: Search | None = None, full: bool = False, rerank_k: int | None = None,
                   first_stage: LoadedModel | None = None, output: PathLike | None = None, resume: bool = False,
                   write: Callable[[Matches], None] | None = None,
                   first_stage_images: PathLike | Sequence[PathLike] | None = None,
                   part: Part | None = None) -> Matches:
    """The captions of `split` (see `read_split`) and the images they name, ranked both ways by the mean
    similarity of `models`; with `rerank_k`, `first_stage` (separable) proposes that many candidates per query
    and only those are scored (an OpenCLIP first stage embeds the images of `first_stage_images`, images inputs
    holding the features' images by their ids). `full` keeps the whole matrix (not with reranking, which avoids it).

    Without reranking every pair is scored, caption block by caption block, through the inference runner: each
    finished caption's similarities are committed to `OUT.partial/` beside the rankings `output` (a temporary
    folder for standard output) as they come, so that `resume` continues an interrupted run; `write` gets the
    `Matches` before those parts are removed, so that a failed write keeps them. With a `part` (under torchrun,
    vltools.io.shards) only its run of the caption blocks is scored, and `output` is its part of the matrix: the
    `Matches` of those captions' columns, written as a part of the set of sims."""
    options = search_options or Search()
    if rerank_k is not None and first_stage is None:
        raise VLToolsError(f"{argument('rerank_k', 'K')} needs {argument('first_stage', 'VSE.pt')}, the separable "
                           "model that proposes candidates")
    if rerank_k is not None and full:
        raise VLToolsError("--sims needs every pair scored, which --rerank avoids; drop one of them")
    if (kind := hdf5_kind(captions)) is not None:
        found = "an HDF5 file" if kind == "hdf5" else f"an HDF5 {kind} file"
        raise VLToolsError(f"{captions}: {found}, but after the features {features} match takes captions JSON lines "
                           f"(scored by {argument('model')}); to match embeddings, give image embeddings first "
                           f"(vltools encode {features} --model MODEL -o IMG_EMB.h5)")
    clip = isinstance(first_stage, OpenClipModel) and rerank_k is not None
    if clip and first_stage_images is None:
        raise VLToolsError(f"{argument('first_stage', str(first_stage.path))} embeds image files: give them with "
                           f"{argument('first_stage_images', 'IMAGES')} (the images of {features}, by the same ids)")
    with FeaturesReader(features) as reader, contextlib.ExitStack() as stack:
        # the header against every model first: a wrong region count or width is reported in seconds
        check_features(reader, [*models, *([first_stage] if rerank_k is not None and not clip else [])])
        chosen = read_split(captions, split)
        check_images(chosen, reader, captions)
        saved, saved_positions = None, None
        if rerank_k is not None:      # the first stage's refusals come before any caption is encoded
            if not clip:
                require_separable(first_stage.model, first_stage.name, first_stage.path)
            saved, saved_positions = _saved_first_stage(options.index_file, first_stage, chosen, features, captions)
        for item in models:
            item.model.to(options.device)
        coverage = Coverage()      # the members of an ensemble share one vocabulary (load_models)
        tokens = models[0].tokenize(chosen.captions, coverage)
        coverage.report(" + ".join(item.path.name for item in models))
        modules = [item.model for item in models]
        sims = None
        images = FeatureBlocks(reader, chosen.image_ids, options.block_images)
        if rerank_k is not None:
            first_stage.model.to(options.device)
            embedded = clip_embeddings(first_stage, first_stage_images, chosen, options) if clip else None
            plan = FirstStage(first_stage.model, None if clip else CaptionBlocks(first_stage.tokenize(chosen.captions),
                                                                                 options.block_captions),
                              options.index, options.nprobe, saved, saved_positions, embedded)
            i2t, t2i = rerank(modules, plan, images, CaptionBlocks(tokens, options.block_captions), rerank_k,
                              options.top_k, options.device, options.precision, options.image_cache_mb)
            forward = (np.asarray(i2t[0]), np.asarray(i2t[1]))
            backward = (np.asarray(t2i[0]), np.asarray(t2i[1]))
            for (values, found), ids, kind in ((forward, chosen.image_ids, "image id"),
                                               (backward, chosen.caption_ids, "caption id")):
                # -inf marks a missing candidate (index -1), not a score
                refuse_nonfinite_results(np.where(found >= 0, values, 0), ids, "similarities", kind,
                                         options.precision)
        else:
            inputs = [str(path) for path in (features, captions, *(item.path for item in models))]
            start, stop = part.span(len(chosen.caption_ids), options.block_captions) if part else (0, None)
            found = stack.enter_context(_all_pairs(modules, images, chosen, tokens, options, output, resume, inputs,
                                                   ",".join(f"{i.path} ({i.digest})" for i in models), start, stop))
            forward, backward = _topk_both(torch.from_numpy(found), options.top_k)
            sims = found if full else None
        attrs = {"models": ",".join(str(i.path) for i in models), "model_names": ",".join(i.name for i in models),
                 "checkpoint_digests": ",".join(i.digest for i in models), "features": str(features),
                 "captions": str(captions), "split": chosen.name, "precision": options.precision,
                 "image_ids_digest": ids_digest(chosen.image_ids),
                 "caption_ids_digest": ids_digest(chosen.caption_ids)}
        caption_images = [chosen.image_ids[i] for i in chosen.caption_image_index]
        if part is not None:     # the columns of this part's captions
            attrs.update(part.attrs(len(chosen.caption_ids), options.block_captions))
            matches = Matches(chosen.image_ids, chosen.caption_ids[start:stop], forward, backward, sims,
                              caption_images[start:stop], attrs)
        else:
            matches = Matches(chosen.image_ids, chosen.caption_ids, forward, backward, sims, caption_images, attrs)
        if write is not None:
            write(matches)
    return matches


@contextlib.contextmanager
def _all_pairs(modules: list[torch.nn.Module], images: FeatureBlocks, chosen: CaptionSplit, tokens: list,
               options: Search, output: PathLike | None, resume: bool, inputs: list[PathLike], models: str,
               start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
    """The [images, captions] similarities of every pair (of the captions start..stop), each
    caption's column kept as it comes (`vltools.infer.runner.computed_rows`: the caption's row of a checkpoint
    chunk) and the checkpoint removed when the block ends. What a column depends on (`models`: each model's path
    and checkpoint digest; the files, split, images, precision) is recorded with the checkpoint, so that a resume
    with other ones is refused; `inputs` are the files whose change since the interrupted run has every caption
    scored again, by name (features held in memory, which have no file, by theirs)."""
    rows = {"models": models, "features": str(inputs[0]), "captions": str(inputs[1]), "caption_split": chosen.name,
            "images": ids_digest(chosen.image_ids), "precision": options.precision}

    own = chosen.caption_ids[start:stop]

    def columns(mine: list[int]) -> Iterator[np.ndarray]:
        blocks = CaptionBlocks([tokens[start + k] for k in mine], options.block_captions)
        computed = similarity_columns(modules, images, blocks, options.device, options.precision,
                                      options.image_cache_mb)
        with contextlib.closing(computed):    # a refusal leaves no autocast on (see finite_results)
            yield from finite_results((block.T.contiguous().numpy() for block in computed),
                                      [own[k] for k in mine], "similarities", "caption id", options.precision)

    with computed_rows("match", None if output is None else str(output), own, columns, "captions",
                       options.block_captions, rows, input_digest(inputs), resume, SIMILARITIES,
                       options.checkpoint_seconds) as blocks:
        found = np.empty((len(chosen.image_ids), len(own)), dtype=np.float32)
        done = 0
        for block in blocks:
            found[:, done:done + len(block)] = block.T
            done += len(block)
        yield found


def _saved_first_stage(index_file: PathLike | None, first_stage: LoadedModel, chosen: CaptionSplit,
                       features: PathLike, captions: PathLike) -> tuple[SavedIndex | None, np.ndarray | None]:
    """The saved index the first stage searches (of its own embeddings of the images of `features` or the captions
    of `captions`), with each indexed row's position among the images or captions matched (`chosen`); an index
    over more than those searches them alone."""
    if index_file is None:
        return None, None
    saved = load_index(index_file)
    check_model(saved, first_stage.digest, f"--first-stage {first_stage.path}")
    if saved.side not in ("images", "captions"):
        raise VLToolsError(f"{index_file}: indexes {saved.side or 'unknown'} embeddings; index the first stage's "
                           "image or caption embeddings (vltools encode)")
    images = saved.side == "images"
    check_source(saved, str(features if images else captions), "features" if images else "captions")
    found = positions(saved, chosen.image_ids if images else chosen.caption_ids, saved.side)
    rows = matched_rows(found)
    if rows is not None:    # an index type that cannot search a subset is refused before anything is encoded
        saved.search(np.zeros((1, saved.file.dims), dtype=np.float32), 1, rows=rows)
    return saved, found


def clip_embeddings(loaded: OpenClipModel, images: PathLike | Sequence[PathLike], chosen: CaptionSplit,
                    options: Search) -> tuple[np.ndarray, np.ndarray]:
    """The (images, captions) embeddings of an OpenCLIP model for the images of `chosen` (found in the images inputs
    `images` by their ids) and its captions, each refused when not finite."""
    image_emb = named_image_embeddings(loaded.clip, images, chosen.image_ids, options.device, options.precision,
                                       options.block_images)
    caption_emb = np.concatenate(list(text_embeddings(loaded.clip, chosen.captions, options.device, options.precision,
                                                      options.block_captions)))
    refuse_nonfinite_results(image_emb, chosen.image_ids, "embeddings", "image id", options.precision)
    refuse_nonfinite_results(caption_emb, chosen.caption_ids, "embeddings", "caption id", options.precision)
    return image_emb, caption_emb


def match_openclip(images: PathLike | Sequence[PathLike], captions: PathLike, loaded: OpenClipModel,
                   split: str | None = None, search_options: Search | None = None, full: bool = False) -> Matches:
    """Zero-shot: the captions of `split` and the images they name (in the images inputs `images`), ranked both
    ways by an OpenCLIP model's cosine similarity (its l2-normalised embeddings' dot products); `full` keeps the
    whole matrix."""
    options = search_options or Search()
    chosen = read_split(captions, split)
    image_emb, caption_emb = clip_embeddings(loaded, images, chosen, options)
    attrs = {"models": str(loaded.path), "model_names": loaded.name, "checkpoint_digests": loaded.digest,
             "images": str(images), "captions": str(captions), "split": chosen.name, "precision": options.precision,
             **loaded.clip.provenance(), "image_ids_digest": ids_digest(chosen.image_ids),
             "caption_ids_digest": ids_digest(chosen.caption_ids)}
    return _both_ways(chosen.image_ids, image_emb, chosen.caption_ids, caption_emb,
                      [chosen.image_ids[i] for i in chosen.caption_image_index], options, full, attrs)


def _both_ways(image_ids: Sequence[str], images, caption_ids: Sequence[str], captions,
               caption_image_ids: Sequence[str] | None, options: Search, full: bool, attrs: dict[str, str]) -> Matches:
    """Captions ranked for each image and images for each caption by the dot products of their embeddings (arrays
    or HDF5 datasets); `full` also keeps the whole matrix."""
    forward = search(images, captions, options.top_k, options.index, options.nprobe, options.device)
    backward = search(captions, images, options.top_k, options.index, options.nprobe, options.device)
    return Matches(list(image_ids), list(caption_ids), forward, backward, full_sims(images, captions) if full else None,
                   None if caption_image_ids is None else list(caption_image_ids), attrs)


def match_sims(first: PathLike, second: PathLike | None, top_k: int = 10) -> Matches:
    """Rankings of a saved similarity matrix (`match --sims`: a file, or the folder of parts a torchrun job wrote),
    or of the mean of two (the SGRAF ensemble of the matrices of SGR and SAF), without scoring any pair again."""
    if second is not None and hdf5_kind(second) != "sims":
        raise VLToolsError(f"{second}: expected a second similarity matrix (match --sims) after {first}")
    paths = [first] if second is None else [first, second]
    mean = average_sims([(path, read_sims(path)) for path in paths])
    sims = torch.from_numpy(mean.sims.astype(np.float32))
    forward, backward = _topk_both(sims, top_k)
    return Matches(list(mean.image_ids), list(mean.caption_ids), forward, backward, sims.numpy(),
                   None if mean.caption_image_ids is None else list(mean.caption_image_ids),
                   {"ensemble_of" if second is not None else "sims": ",".join(map(str, paths))})


def match_embeddings(first: PathLike, second: PathLike, search_options: Search | None = None,
                     full: bool = False) -> Matches:
    """Top-k search between image and caption embeddings files, or (two image embeddings files) of the database
    images for each query image, the query left out of its own list; `full` also keeps the whole matrix."""
    options = search_options or Search()
    images = open_embeddings(first)
    try:
        if hdf5_kind(second) != "embeddings":
            raise VLToolsError(f"{second}: expected caption embeddings (vltools encode CAPS.jsonl) after the image "
                               f"embeddings {first}")
        captions = open_embeddings(second)
        try:
            if images.side == "images" and captions.side == "images":
                return _match_images(images, captions, options, full)
            _check_pair(images, captions)
            return _both_ways(images.ids, images.emb, captions.ids, captions.emb, captions.caption_image_ids, options,
                              full, {"image_embeddings": str(first), "caption_embeddings": str(second),
                                     "checkpoint_digest": str(images.checkpoint_digest)})
        finally:
            captions.close()
    finally:
        images.close()


def _match_images(queries: EmbeddingsFile, database: EmbeddingsFile, options: Search, full: bool) -> Matches:
    """i2i: the database images ranked for each query image (the query itself left out of its own list)."""
    check_same_model(queries, database)
    values, indices = search(queries.emb, database.emb, options.top_k + 1, options.index, options.nprobe,
                             options.device)
    forward = drop_self(queries.ids, database.ids, values, indices, options.top_k)
    return Matches(list(queries.ids), list(database.ids), forward, None,
                   full_sims(queries.emb, database.emb) if full else None, None,
                   {"query_embeddings": str(queries.path), "database_embeddings": str(database.path),
                    "checkpoint_digest": str(queries.checkpoint_digest), "direction": "i2i"}, "i2i")


def match_index(queries: PathLike, index_file: PathLike, search_options: Search | None = None) -> Matches:
    """Top-k rows of a saved index (`vltools index`) for every query of an embeddings file of the same model:
    captions for images (i2t), images for captions (t2i), or images for images (i2i, the query left out of its
    own list), without rebuilding the index."""
    options = search_options or Search()
    saved = load_index(index_file)
    found = open_embeddings(queries)
    try:
        direction = {("images", "captions"): "i2t", ("captions", "images"): "t2i",
                     ("images", "images"): "i2i"}.get((found.side, saved.side))
        if direction is None:
            raise VLToolsError(f"{queries}: {found.side or 'unknown'} embeddings cannot query the "
                               f"{saved.side or 'unknown'} embeddings indexed in {index_file}; query captions with "
                               "images, images with captions, or images with images")
        extra = 1 if direction == "i2i" else 0
        values, indices = search_embeddings(saved, found, options.top_k + extra, options.nprobe)
        if direction == "i2i":
            values, indices = drop_self(found.ids, saved.ids, values, indices, options.top_k)
        attrs = {"queries": str(queries), "index_file": str(index_file), "factory": saved.file.factory,
                 "metric": saved.file.metric, "checkpoint_digest": str(found.checkpoint_digest),
                 "direction": direction}
        return Matches(list(found.ids), list(saved.ids), (values, indices), None, None, None, attrs, direction)
    finally:
        found.close()


def _check_pair(images: EmbeddingsFile, captions: EmbeddingsFile) -> None:
    """Image embeddings first, caption embeddings second, both from the same checkpoint."""
    if images.side != "images":
        raise VLToolsError(f"{images.path}: holds {images.side or 'unknown'} embeddings; give the image embeddings "
                           "first, then the caption embeddings")
    if captions.side != "captions":
        raise VLToolsError(f"{captions.path}: holds {captions.side or 'unknown'} embeddings; give caption "
                           "embeddings (vltools encode CAPS.jsonl) second")
    check_same_model(images, captions)


def input_kind(first: PathLike, with_models: bool, rerank_k: int | None = None) -> str:
    """What `match FIRST ...` was given: "sims", "embeddings" (scored or encoded already: no models) or
    "features" (scored by models)."""
    kind = hdf5_kind(first)
    if kind in ("sims", "embeddings"):
        if with_models or rerank_k:
            what = "similarity matrices were given, which are already scored" if kind == "sims" else \
                "embeddings were given, which are already encoded"
            raise VLToolsError(f"{first}: {what}; drop {argument('model')}/{argument('rerank_k')}")
        return kind
    if not with_models:
        raise no_model()
    return "features"


def check_index(kind: str, index: str, models: Sequence[LoadedModel] = (), rerank_k: int | None = None) -> None:
    """Refuse an `index` other than exact where it would go unused: it searches separable embeddings (two files of
    `encode`, or the first stage of --rerank), so scored matrices and every pair scored by --model ignore it."""
    if index == EXACT or kind in ("embeddings", "openclip") or (kind == "features" and rerank_k is not None):
        return
    given = argument("index", index)
    if kind == "sims":
        raise VLToolsError(f"{given}: the similarity matrices are already scored, so there is nothing to search; "
                           f"{argument('index')} searches the embeddings of `vltools encode` or a "
                           f"{argument('first_stage')} model")
    for item in models:
        if not getattr(item.model, "separable", False):
            raise VLToolsError(f"{given}: {item.path} holds a cross-attention model ({item.name}), whose "
                               "similarities are not dot products of separate image and caption embeddings, so no "
                               f"index can search them; add {argument('rerank_k', 'K')} "
                               f"{argument('first_stage', 'VSE.pt')} (the index searches the separable first stage, "
                               f"{item.name} rescores its K candidates per query) or drop {argument('index')}")
    raise VLToolsError(f"{given}: without {argument('rerank_k')} every pair is scored exactly and the index would go "
                       f"unused; search an index with {argument('rerank_k', 'K')} {argument('first_stage', 'CKPT')}, "
                       "or `vltools encode` the images and the captions and match the two embeddings files with "
                       f"{argument('index')}")


def check_index_file(kind: str, second: PathLike | None, options: Search, rerank_k: int | None,
                     full: bool = False) -> None:
    """A saved index is searched by one embeddings file (no second input) or by the first stage of --rerank;
    without one, `match` needs its second input, but to rank one similarity matrix."""
    if options.index_file is None:
        if second is None and kind != "sims":
            raise VLToolsError("match needs a second input (captions, caption embeddings or a sims file) unless "
                               f"{argument('index_file')} gives a saved index to search, or the first is a sims "
                               "file to rank alone")
        return
    if full:
        raise VLToolsError("--sims needs every pair scored, which searching a saved index avoids; drop one of them")
    saved = argument("index_file", str(options.index_file))
    if options.index != EXACT:
        raise VLToolsError(f"{argument('index', options.index)} builds an index in memory and {saved} is a saved "
                           "one; drop one of them")
    if kind == "embeddings" and second is not None:
        raise VLToolsError(f"{saved} is searched by the queries alone; drop {second}, or match the two embeddings "
                           f"files without {argument('index_file')}")
    if kind == "sims":
        raise VLToolsError(f"{saved}: the similarity matrices are already scored, so there is nothing to search; "
                           "query it with embeddings of `vltools encode`")
    if kind == "openclip":
        raise VLToolsError(f"{saved}: an OpenCLIP model given images and captions embeds both; search the index with "
                           "the queries' embeddings of `vltools encode` (match QUERIES.h5 --index-file), or drop it")
    if kind == "features" and (rerank_k is None or second is None):
        raise VLToolsError(f"{saved}: region features are scored by {argument('model')} pair by pair; the index is "
                           f"searched by encode's embeddings (match QUERIES.h5 {argument('index_file')}) or by the "
                           f"first stage of {argument('rerank_k', 'K')} {argument('first_stage', 'CKPT')} with "
                           "FEATS.h5 CAPS.jsonl")


def check_resume(kind: str, rerank_k: int | None, output: PathLike | None, resume: bool) -> None:
    """Refuse `--resume` where nothing is kept to resume: without -o (`check_output`), and in the short modes
    (reranking, sims or embeddings inputs, a saved index), which write their output at the end."""
    check_output(None if output is None else str(output), resume)
    if resume and (kind != "features" or rerank_k is not None):
        what = f"{argument('rerank_k', 'K')} scores only its candidates" if kind == "features" else \
            f"a match of {kind} files scores no pair"
        raise VLToolsError(f"--resume continues a match of region features by --model that scores every pair; {what}, "
                           "keeps nothing to resume and starts over anyway: drop --resume")
