"""`vltools caption` and `vltools.caption`: captions of images, log p(c | I) of captions (`logp`), or the
descriptions of the differences of image pairs (`pairs`, an L2C model)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from vltools.devices import PRECISIONS, autocast, resolve_device
from vltools.errors import ArgumentError, argument
from vltools.infer import checks
from vltools.infer.settings import COMMIT_SECONDS, locked_part, parse_shard
from vltools.io.checkpoint import Checkpoint, Records
from vltools.io.features import FeaturesReader
from vltools.io.held import instance_of
from vltools.io.jsonl import iter_json_lines
from vltools.io.lock import output_lock
from vltools.io.logp import write_logp
from vltools.io.output import is_stdout
from vltools.io.progress import log
from vltools.io.provenance import ids_digest, input_digest, provenance
from vltools.io.records import caption_ids, write_records

if TYPE_CHECKING:
    from vltools.infer.loader import LoadedModel
    from vltools.io.shards import Part

PathLike = str | os.PathLike
# the inference modules (torch) are imported by the functions below, once `caption` has checked every argument


def caption(model: PathLike | LoadedModel, features: PathLike, captions: PathLike | None = None,
            output: PathLike | None = None, *, pairs: PathLike | None = None, split: str | None = None,
            beam: int = 3, sample: bool = False, temperature: float = 1.0, max_len: int | None = None,
            length_penalty: float = 0.0, logp: bool = False, block_images: int = 25, block_captions: int = 100,
            batch_size: int = 50, device: str = "auto", precision: str = "fp32", seed: int = 0,
            resume: bool = False, checkpoint_seconds: float = COMMIT_SECONDS,
            shard: str | None = None) -> list[dict] | None:
    """Caption the images of FEATURES (all, in file order, or those of the `split` of CAPTIONS, in first-mention
    order) by beam search (`beam` 1: greedy) or sampling: one {"image_id", "caption"} per image, in that order,
    written as JSONL to `output` (`-`: standard output; None: not written) and returned. Every run keeps its finished
    captions in `OUTPUT.partial/`; `resume` continues an interrupted one (vltools.io.checkpoint). `shard` "i/n"
    captions the i-th of n runs of the images, into `output`, or as part i of n of a set when `output` is a folder
    (vltools.io.shards); under torchrun each process captions its part (returned by each). With `logp`, write log
    p(c | I) of every caption of CAPTIONS under every image they name instead (HDF5, for `score self-retrieval`;
    under torchrun the processes share its blocks and the first writes it, returning None on the others). With
    `pairs` and an l2c model, describe the differences of each pair of PAIRS [`split`]."""
    if not instance_of(model, "vltools.infer.loader", "LoadedModel"):
        checks.path(model, "model")
    checks.path(features, "features")
    checks.path(captions, "captions", optional=True)
    checks.path(output, "output", optional=True)
    checks.path(pairs, "pairs", optional=True)
    checks.split(split, "split", optional=True)
    checks.integer(beam, "beam", 1, checks.MAX_BEAM)
    checks.optional_integer(max_len, "max_len", 1, checks.MAX_CAPTION_WORDS)
    checks.number(length_penalty, "length_penalty", 0)
    checks.number(temperature, "temperature", 0, low_open=True)
    for name, value in (("sample", sample), ("logp", logp), ("resume", resume)):
        checks.flag(value, name)
    for name, value in (("block_images", block_images), ("block_captions", block_captions),
                        ("batch_size", batch_size)):
        checks.integer(value, name, 1)
    checks.device(device, "device")
    checks.choice(precision, "precision", PRECISIONS)
    checks.integer(seed, "seed", 0, checks.MAX_SEED)
    checks.number(checkpoint_seconds, "checkpoint_seconds", 0)
    parse_shard(shard)
    if pairs is not None and (captions is not None or logp or sample):
        raise ArgumentError("pairs", f"describes pairs by beam search: give no {argument('captions')}, "
                                     f"{argument('logp')} or {argument('sample')}")
    if split is not None and captions is None and pairs is None:
        raise ArgumentError("split", f"needs {argument('captions')}, the captions JSONL that holds the splits")
    if logp and captions is None:
        raise ArgumentError("logp", f"needs {argument('captions')}, the captions to score")
    if logp and output is None:
        raise ArgumentError("logp", f"needs {argument('output', 'LOGP.h5')}, the file its matrix is written to")
    if resume and (logp or output is None or is_stdout(output)):
        raise ArgumentError("resume", f"needs {argument('output', 'OUT.jsonl')} and works when captioning (not with "
                                      f"{argument('logp')})")
    from vltools.infer import runner
    from vltools.infer.caption import images_to_caption, split_records
    from vltools.infer.loader import LoadedModel, load_model

    with contextlib.ExitStack() as stack:
        if logp:     # a matrix, which the first process of a torchrun job writes (vltools.infer.caption)
            stack.enter_context(output_lock(output))
            target, part = output, None
        else:
            target, part = stack.enter_context(locked_part(output, shard, "jsonl"))
            if runner.finished_part(target, part, resume):
                return [value for _, value in iter_json_lines(target, "rerun its part without --resume")]
        stack.enter_context(autocast(resolve_device(device), precision))
        if pairs is not None:
            return _describe(model, features, pairs, split, target, beam, max_len, batch_size, device, precision,
                             resume, checkpoint_seconds, part)
        loaded = model if isinstance(model, LoadedModel) else load_model(model, "captioner")
        records = split_records(captions, split) if captions is not None else None
        with FeaturesReader(features) as reader:
            image_ids = images_to_caption(reader, records, captions)
            if logp:
                _logp(loaded, reader, image_ids, records, output, features, captions, block_images, block_captions,
                      device, precision)
                return None
            return _captions(loaded, reader, runner.part_ids(image_ids, part, batch_size), target, features, beam,
                             sample, temperature, max_len, length_penalty, batch_size, device, precision, seed, resume,
                             checkpoint_seconds)


def _logp(loaded: LoadedModel, reader: FeaturesReader, image_ids: list[str], records: list[dict],
          output: PathLike | None, features: PathLike, captions: PathLike, block_images: int, block_captions: int,
          device: str, precision: str) -> None:
    from vltools.infer.caption import shared_logp_matrix

    matrix = shared_logp_matrix(loaded, reader, image_ids, [r["caption"] for r in records], block_images,
                                block_captions, resolve_device(device))
    if matrix is None:     # another process of a torchrun job: the first writes the matrix
        return
    write_logp(output, matrix, image_ids, [r["image_id"] for r in records], caption_ids(records),
               provenance(model=str(loaded.path), features=features, captions=captions, precision=precision))
    log.info("caption: wrote log p(c|I) of %d captions x %d images", len(records), len(image_ids))


def _captions(loaded: LoadedModel, reader: FeaturesReader, image_ids: list[str], output: PathLike | None,
              features: PathLike, beam: int, sample: bool, temperature: float, max_len: int | None,
              length_penalty: float, batch_size: int, device: str, precision: str, seed: int, resume: bool,
              checkpoint_seconds: float) -> list[dict] | None:
    from vltools.infer import runner
    from vltools.infer.caption import caption_batches

    method = "sample" if sample else "beam" if beam > 1 else "greedy"
    max_len = max_len or loaded.prep.max_words or 16
    chosen = resolve_device(device)
    # what each caption depends on, recorded in OUT.partial/ so that --resume refuses other ones
    options = {"--temperature": temperature, "--seed": seed} if sample else \
        {"--beam": beam, "--length-penalty": length_penalty}

    def produce(todo: list[str]) -> Iterator[tuple[list[str], list[dict]]]:
        for ids, texts, logprob in caption_batches(loaded.model, loaded.vocab, reader, todo, method, beam_size=beam,
                                                   max_len=max_len, length_penalty=length_penalty,
                                                   temperature=temperature, seed=seed, batch_size=batch_size,
                                                   device=chosen):
            runner.refuse_nonfinite_results(logprob[:, None], ids, "caption log-probabilities", "image id", precision)
            yield ids, [{"image_id": i, "caption": c} for i, c in zip(ids, texts, strict=True)]

    with runner.checkpoint(None if output is None else str(output), Records(),
                           {"--sample": sample, **options, "--max-len": max_len, "--precision": precision},
                           input_digest([loaded.path, features]), resume, checkpoint_seconds) as kept:
        runner.run("caption", image_ids, kept, produce, "captions", batch_size)
        found = _written(kept, output, image_ids, loaded.path, "captions")
    if output is not None:
        log.info("caption: wrote %d captions (%s)", len(found), method if method != "beam" else f"beam {beam}")
    return found


def _written(kept: Checkpoint, output: PathLike | None, order: list[str], model: object,
             what: str) -> list[dict]:
    """The checked captions of `order`, written to `output` when it is given; the checkpoint goes once they are."""
    from vltools.infer.caption import checked_captions

    found = checked_captions(kept, order, model, what)
    if output is not None:
        write_records(output, found)
    kept.remove()
    return found


def _describe(model: PathLike | LoadedModel, features: PathLike, pairs_path: PathLike, split: str | None,
              output: PathLike | None, beam: int, max_len: int | None, batch_size: int, device: str,
              precision: str, resume: bool, checkpoint_seconds: float, part: Part | None) -> list[dict] | None:
    """The L2C descriptions of the pairs of PAIRS [`split`], resumable and shardable."""
    from vltools.data.l2c import FeatureMaps, check_map_features, read_pairs
    from vltools.infer import runner
    from vltools.infer.loader import LoadedModel, load_model
    from vltools.infer.pairs import describe_batches

    loaded = model if isinstance(model, LoadedModel) else load_model(model, "l2c")
    pairs = read_pairs(pairs_path, split)
    check_map_features(features, pairs.image_ids, pairs_path, loaded.config.get("feature_dim"), loaded.path)
    pair_index = {pair_id: n for n, pair_id in enumerate(pairs.pair_ids)}
    order = runner.part_ids(pairs.pair_ids, part, batch_size)
    max_len = max_len or loaded.prep.max_words or 64
    inputs = [loaded.path, features]
    options: dict[str, object] = {"--beam": beam, "--max-len": max_len, "--precision": precision}
    if is_stdout(pairs_path):      # no file to digest: record the pairs themselves
        options["--pairs -"] = ids_digest([f"{p}\t{a}\t{b}" for p, a, b in
                                           zip(pairs.pair_ids, pairs.image_a, pairs.image_b, strict=True)])
    else:
        inputs.append(pairs_path)
    maps = FeatureMaps(features)

    def produce(todo: list[str]) -> Iterator[tuple[list[str], list[dict]]]:
        rows = [pair_index[pair_id] for pair_id in todo]
        batches = describe_batches(loaded.model, maps, [pairs.image_a[n] for n in rows],
                                   [pairs.image_b[n] for n in rows], loaded.vocab, beam_size=beam, max_len=max_len,
                                   batch_size=batch_size, device=resolve_device(device))
        for start, (texts, logprob) in zip(range(0, len(todo), batch_size), batches, strict=False):
            ids = todo[start:start + batch_size]
            runner.refuse_nonfinite_results(logprob[:, None], ids, "description log-probabilities", "pair id",
                                            precision)
            yield ids, [{"pair_id": i, "caption": text} for i, text in zip(ids, texts, strict=True)]

    with runner.checkpoint(None if output is None else str(output), Records(), options, input_digest(inputs),
                           resume, checkpoint_seconds) as kept:
        runner.run("caption --pairs", order, kept, produce, "pairs", batch_size)
        found = _written(kept, output, order, loaded.path, "pair descriptions")
    if output is not None:
        log.info("caption: wrote %d pair descriptions (beam %d)", len(found), beam)
    return found
