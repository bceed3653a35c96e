"""`vltools match`: rank captions for images and images for captions with trained matching models."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import (
    SPLIT,
    FiniteFloat,
    Integer,
    block_options,
    device_option,
    output_option,
    precision_option,
    primary_output,
    resume_option,
    threads_option,
)
from vltools.infer.settings import EXACT, MATCH_BLOCK

MEMORY_NOTE = """\b
Memory (SGR at official sizes, default blocks, fp32): peak = ~0.7 GB (torch, model, one image block) + ~0.5 GB
(one block's work: SGR chunks its [images x captions x words x 1024] intermediates to 2^25 floats) + cached image
embeddings (n_images x 36 x 1024 x 4 B, at most --image-cache-mb) + the output (n_images x n_captions x 4 B).
Measured 1.22 GB for 128 x 1024 on CPU; so about 1.4 GB for 1K x 5K and 2.5 GB for 5K x 25K
(details: examples/sgraf/README.md)."""


@primary_output("output", stdout=True, locks=False)
@click.command("match", epilog=MEMORY_NOTE)
@click.argument("first", metavar="FEATS.h5|IMG_EMB.h5|SIMS.h5|IMAGES/",
                type=InputFile("hdf5", "folder", formats=("features", "embeddings", "sims")))
@click.argument("second", metavar="[CAPS.jsonl|CAP_EMB.h5|SIMS.h5]", required=False,
                type=InputFile("jsonl", "hdf5", stdin=True))
@click.option("--model", "model_paths", multiple=True, metavar="CKPT|NAME", type=InputFile("checkpoint", names=True),
              help="Matching checkpoint, or a name from `vltools models list` (all its checkpoints); repeat for an "
                   "ensemble (SGRAF = --model sgr.pt --model saf.pt, or --model sgraf: mean of their similarities); "
                   "or one OpenCLIP model, openclip:ARCH[:PRETRAINED_OR_FILE], ranking an images folder and captions "
                   "zero-shot. Not used with two embeddings files.")
@click.option("--split", type=SPLIT,
              help="Captions of this split are matched [test when the captions have a split field, else every "
                   "caption].")
@click.option("-k", "--top-k", type=Integer(min=1), default=10, show_default=True,
              help="Results kept per query in the rankings.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Rankings JSONL (default: standard output).")
@output_option("--sims", "sims_path", type=click.Path(dir_okay=False), binary="HDF5",
              help="Also write the full n_images x n_captions matrix (HDF5 that `vltools score retrieval` reads).")
@click.option("--rerank", "rerank_k", type=Integer(min=1), metavar="K",
              help="Two-stage search: --first-stage proposes K candidates per query, --model reranks only those.")
@click.option("--first-stage", type=InputFile("checkpoint", names=True), metavar="VSE.pt|openclip:ARCH[:...]",
              help="Separable checkpoint (vse) proposing candidates for --rerank, or an OpenCLIP model (which reads "
                   "the images of --first-stage-images).")
@click.option("--first-stage-images", type=InputFile("images"), metavar="IMAGES",
              help="For an OpenCLIP --first-stage: the image files of FEATS.h5 (a folder, a tar, a list or an "
                   "images JSONL), found by the features' ids.")
@click.option("--index", default=EXACT, show_default=True,
              help="Search over separable embeddings: exact (blocked matmul) or a FAISS index factory string "
                   "such as Flat, IVF1024,Flat, IVF4096,PQ64 (needs faiss).")
@click.option("--index-file", type=InputFile("hdf5", formats=("index",)), metavar="INDEX",
              help="A saved index (vltools index) searched without rebuilding: by the queries' embeddings "
                   "IMG_EMB.h5 or CAP_EMB.h5 alone (no second input), or as the first stage of --rerank.")
@click.option("--nprobe", type=Integer(min=1), default=16, show_default=True,
              help="IVF lists visited per query (FAISS IVF indexes, built or saved).")
@block_options(*MATCH_BLOCK)
@click.option("--image-cache-mb", type=FiniteFloat(min=0), default=2048.0, show_default=True,
              help="Image embeddings kept between caption blocks, at most this many MB (the rest is re-encoded); "
                   "with --rerank, the encoded candidates kept between query blocks.")
@precision_option()
@device_option()
@threads_option()
@resume_option("-o, --model, inputs and options", "captions (every pair scored by --model)", "OUT.partial/",
               "The short runs (--rerank, sims, embeddings, --index-file) write at the end and take no --resume.")
def command(first: str, second: str | None, model_paths: tuple[str, ...], split: str | None, top_k: int,
            output: str | None, sims_path: str | None, rerank_k: int | None, first_stage: str | None,
            first_stage_images: str | None, index: str, index_file: str | None, nprobe: int, block_images: int,
            block_captions: int, image_cache_mb: float, precision: str, device: str, resume: bool,
            checkpoint_seconds: float) -> None:
    """Rank captions for every image (i2t) and images for every caption (t2i): top-k per query as rankings JSONL.

    Either FEATS.h5 (region features) and CAPS.jsonl with --model (cross-attention or separable checkpoints),
    or IMAGES/ (a folder of the captions' images) and CAPS.jsonl with --model openclip:ARCH (zero-shot), or a
    similarity matrix of `match --sims` (a file, or the folder of parts a torchrun job wrote), or two (ranked by
    their mean: SGRAF from the saved SGR and SAF matrices), or two files from `vltools encode` (image then caption
    embeddings of one separable model), or two image embeddings files (query images then database images, e.g.
    rmac): images ranked for images (i2i), each query left out of its own list. With --index-file, one embeddings
    file of queries searches a saved index of the same model's embeddings (captions for images, images for
    captions, or images for images). Queries follow input order: images in order of first mention in the split's
    captions, then captions in file order. Every image a selected caption names must be in FEATS.h5.
    """
    from vltools.stages.match import match

    match(first, second, model_paths, split=split, top_k=top_k, output="-" if output is None else output,
          sims=sims_path, rerank_k=rerank_k, first_stage=first_stage, index=index, index_file=index_file,
          nprobe=nprobe, block_images=block_images, block_captions=block_captions, image_cache_mb=image_cache_mb,
          precision=precision, device=device, resume=resume, checkpoint_seconds=checkpoint_seconds,
          first_stage_images=first_stage_images)
