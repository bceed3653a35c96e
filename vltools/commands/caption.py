"""`vltools caption --model CKPT FEATS.h5 [CAPS.jsonl]`: captions of images, or (--logp) log p(c | I) of captions;
`--pairs PAIRS.jsonl` with an L2C checkpoint: descriptions of the differences of image pairs."""

from __future__ import annotations

from collections.abc import Iterator

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import (
    BEAMS,
    CAPTION_WORDS,
    SEED_RANGE,
    SPLIT,
    FiniteFloat,
    batch_size_option,
    block_options,
    device_option,
    output_option,
    precision_option,
    primary_output,
    resume_option,
    shard_option,
    threads_option,
)
from vltools.devices import autocast, resolve_device
from vltools.io.output import is_stdout
from vltools.io.progress import log


@primary_output("output", stdout=True)
@click.command("caption")
@click.option("--model", "model_path", required=True, type=InputFile("checkpoint"),
              help="Captioner checkpoint (vltools train --model neuraltalk2|adaptive-attention), or with --pairs an "
                   "l2c checkpoint.")
@click.option("--pairs", "pairs_path", type=InputFile("jsonl", stdin=True),
              help="Describe the image pairs of this pairs JSONL (L2C; FEATURES from segment-pool): one "
                   "{pair_id, caption} line per pair, in input order.")
@click.argument("features", type=InputFile("hdf5", formats=("features",)))
@click.argument("captions", required=False, type=InputFile("jsonl", stdin=True))
@click.option("--split", type=SPLIT, help="Only the images (or, with --logp, the captions) of this split of CAPTIONS.")
@output_option("-o", "--output", type=click.Path(dir_okay=False),
               binary=lambda values: "HDF5" if values["logp"] else None,
               help="Captions JSONL, or with --logp the log-probability HDF5 (default: standard output).")
@click.option("--beam", type=BEAMS, default=3, show_default=True, help="Beam size; 1 = greedy.")
@click.option("--sample", is_flag=True, help="Sample each word from softmax(logp / temperature) instead.")
@click.option("--temperature", type=FiniteFloat(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--max-len", type=CAPTION_WORDS, help="Most words per caption [the checkpoint's max_words].")
@click.option("--length-penalty", type=FiniteFloat(min=0), default=0.0, show_default=True,
              help="Choose among finished beams by logp / length**A.")
@click.option("--logp", is_flag=True, help="Write log p(c | I) of every caption of CAPTIONS under every image they "
                                           "name (for `score self-retrieval`) instead of captioning.")
@block_options(25, 100)
@batch_size_option(50, "Images per batch.")
@device_option()
@precision_option()
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True, help="Seed of --sample.")
@resume_option("-o, checkpoint, features and decoding options", "captions")
@shard_option()
@threads_option()
def command(model_path: str, pairs_path: str | None, features: str, captions: str | None, split: str | None,
            output: str | None, beam: int,
            sample: bool, temperature: float, max_len: int | None, length_penalty: float, logp: bool,
            block_images: int, block_captions: int, batch_size: int, device: str, precision: str, seed: int,
            resume: bool, checkpoint_seconds: float, shard: str | None) -> None:
    """Caption the images of FEATURES (all, in file order, or those of CAPTIONS [--split], in first-appearance
    order) with beam search (batched over images and beams), greedy decoding or sampling: one
    {"image_id", "caption"} line per image, in input order.

    With --logp, score every caption of CAPTIONS under every image CAPTIONS names and write the
    matrix (captions x images) as HDF5 for `vltools score self-retrieval`.

    With --pairs PAIRS.jsonl and an l2c checkpoint, describe the differences of each pair of PAIRS [--split]
    (FEATURES from segment-pool): one {"pair_id", "caption"} line per pair, in input order (beam search).
    """
    from vltools.infer import runner
    from vltools.infer.caption import (
        caption_batches,
        images_to_caption,
        shared_logp_matrix,
        split_records,
        write_checked_captions,
    )
    from vltools.infer.loader import load_model
    from vltools.infer.runner import shard_ids
    from vltools.io.checkpoint import Records
    from vltools.io.features import FeaturesReader
    from vltools.io.logp import write_logp
    from vltools.io.provenance import input_digest, provenance
    from vltools.io.records import caption_ids

    if pairs_path is not None:
        if captions is not None or logp or sample:
            raise click.UsageError("--pairs describes pairs by beam search: give no CAPTIONS, --logp or --sample")
        if resume and is_stdout(output):
            raise click.UsageError("--resume needs -o OUT.jsonl")
        with autocast(resolve_device(device), precision):
            _describe(model_path, features, pairs_path, split, output, beam, max_len, batch_size, device, precision,
                      resume, checkpoint_seconds, shard)
        return
    if split is not None and captions is None:
        raise click.UsageError("--split needs CAPTIONS, the captions JSONL that holds the splits")
    if logp and captions is None:
        raise click.UsageError("--logp needs CAPTIONS, the captions to score")
    if resume and (logp or is_stdout(output)):
        raise click.UsageError("--resume needs -o OUT.jsonl and works when captioning (not with --logp)")
    loaded = load_model(model_path, "captioner")
    chosen = resolve_device(device)
    records = split_records(captions, split) if captions is not None else None
    with FeaturesReader(features) as reader, autocast(chosen, precision):
        image_ids = images_to_caption(reader, records, captions)
        if logp:
            matrix = shared_logp_matrix(loaded, reader, image_ids, [r["caption"] for r in records], block_images,
                                        block_captions, chosen)
            if matrix is None:     # another process of a torchrun job: the first writes the whole matrix
                return
            write_logp(output, matrix, image_ids, [r["image_id"] for r in records], caption_ids(records),
                       provenance(model=model_path, features=features, captions=captions, precision=precision))
            log.info("caption: wrote log p(c|I) of %d captions x %d images", len(records), len(image_ids))
            return
        image_ids = shard_ids(image_ids, shard)
        method = "sample" if sample else "beam" if beam > 1 else "greedy"
        max_len = max_len or loaded.prep.max_words or 16
        # what each caption depends on, recorded in OUT.partial/ so that --resume refuses other ones
        options = {"--temperature": temperature, "--seed": seed} if sample else \
            {"--beam": beam, "--length-penalty": length_penalty}

        def produce(todo: list[str]) -> Iterator[tuple[list[str], list[dict]]]:
            for ids, texts in caption_batches(loaded.model, loaded.vocab, reader, todo, method, beam_size=beam,
                                              max_len=max_len, length_penalty=length_penalty,
                                              temperature=temperature, seed=seed, batch_size=batch_size,
                                              device=chosen):
                yield ids, [{"image_id": i, "caption": c} for i, c in zip(ids, texts, strict=True)]

        with runner.checkpoint(output, Records(), {"--sample": sample, **options, "--max-len": max_len,
                                                   "--precision": precision},
                               input_digest([model_path, features]), resume, checkpoint_seconds) as kept:
            runner.run("caption", image_ids, kept, produce, "captions", batch_size)
            if kept is None:     # another process of a torchrun job: the first writes every caption
                return
            written = write_checked_captions(kept, output, image_ids, model_path)
    log.info("caption: wrote %d captions (%s)", written, method if method != "beam" else f"beam {beam}")


def _describe(model_path: str, features: str, pairs_path: str, split: str | None, output: str | None, beam: int,
              max_len: int | None, batch_size: int, device: str, precision: str, resume: bool,
              checkpoint_seconds: float, shard: str | None) -> None:
    """`caption --pairs`: the L2C descriptions of the pairs of PAIRS [--split], resumable and shardable."""
    from vltools.data.l2c import FeatureMaps, check_map_features, read_pairs
    from vltools.infer import runner
    from vltools.infer.caption import write_checked_captions
    from vltools.infer.loader import load_model
    from vltools.infer.pairs import describe_batches
    from vltools.infer.runner import shard_ids
    from vltools.io.checkpoint import Records
    from vltools.io.provenance import ids_digest, input_digest

    loaded = load_model(model_path, "l2c")
    pairs = read_pairs(pairs_path, split)
    check_map_features(features, pairs.image_ids, pairs_path, loaded.config.get("feature_dim"), model_path)
    pair_index = {pair_id: n for n, pair_id in enumerate(pairs.pair_ids)}
    order = shard_ids(pairs.pair_ids, shard)
    max_len = max_len or loaded.prep.max_words or 64
    inputs = [model_path, features]
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
        for start, texts in zip(range(0, len(todo), batch_size), batches, strict=False):
            ids = todo[start:start + batch_size]
            yield ids, [{"pair_id": i, "caption": text} for i, text in zip(ids, texts, strict=True)]

    with runner.checkpoint(output, Records(), options, input_digest(inputs), resume, checkpoint_seconds) as kept:
        runner.run("caption --pairs", order, kept, produce, "pairs", batch_size)
        if kept is None:         # another process of a torchrun job: the first writes every description
            return
        written = write_checked_captions(kept, output, order, model_path, "pair descriptions")
    log.info("caption: wrote %d pair descriptions (beam %d)", written, beam)
