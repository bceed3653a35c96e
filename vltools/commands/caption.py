"""`vltools caption --model CKPT FEATS.h5 [CAPS.jsonl]`: captions of images, or (--logp) log p(c | I) of captions;
`--pairs PAIRS.jsonl` with an L2C checkpoint: descriptions of the differences of image pairs."""

from __future__ import annotations

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


@primary_output("output", stdout=True, locks=False)
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
@output_option("-o", "--output", type=click.Path(),
               binary=lambda values: "HDF5" if values["logp"] else None,
               help="Captions JSONL, or a folder of parts (--shard I/N, torchrun), or with --logp the "
                    "log-probability HDF5 (default: standard output).")
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
    from vltools.stages.caption import caption

    caption(model_path, features, captions, "-" if output is None else output, pairs=pairs_path, split=split,
            beam=beam, sample=sample, temperature=temperature, max_len=max_len, length_penalty=length_penalty,
            logp=logp, block_images=block_images, block_captions=block_captions, batch_size=batch_size,
            device=device, precision=precision, seed=seed, resume=resume, checkpoint_seconds=checkpoint_seconds,
            shard=shard)
