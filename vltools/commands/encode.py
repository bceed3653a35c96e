"""`vltools encode`: image or caption embeddings of a separable model (or OpenCLIP), for search over large galleries."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import (
    SPLIT,
    Integer,
    batch_size_option,
    device_option,
    image_side,
    output_option,
    precision_option,
    primary_output,
    resume_option,
    shard_option,
    threads_option,
    workers_option,
)


@primary_output("output", stdout=True, locks=False)
@click.command("encode")
@click.argument("source", nargs=-1, required=True, metavar="FEATS.h5|CAPS.jsonl|IMAGES...",
                type=InputFile("hdf5", "jsonl", "images", stdin=True))
@click.option("--model", "model_path", required=True, type=InputFile("checkpoint"),
              metavar="CKPT|openclip:ARCH[:PRETRAINED_OR_FILE]",
              help="A separable checkpoint (vse on features or captions; rmac on images: an images JSONL, folder, "
                   "list or Hugging Face dataset), or an OpenCLIP model on images (folders, image files, tars, "
                   "lists) or captions: "
                   "openclip:ViT-B-32 (its default pretrained weights), openclip:ViT-B-32:laion2b_s34b_b79k (a tag), "
                   "openclip:ViT-B-32:FILE (a .pt, .bin or .safetensors file), openclip:ViT-B-32:random (seeded, "
                   "for tests); `vltools models available` lists tags.")
@output_option("-o", "--output", type=click.Path(allow_dash=True), binary="HDF5",
               help="Embeddings HDF5, or a folder of parts (--shard I/N, torchrun) (default: standard output, never "
                    "a terminal).")
@click.option("--split", type=SPLIT,
              help="For captions: encode this split [test when the captions have a split field, else every "
                   "caption]; for rmac with --proxy: the images of this split [test].")
@click.option("--captions", "captions_path", type=InputFile("jsonl"),
              help="For images: encode only the images that the --split captions of this JSONL name, in the "
                   "order `vltools match` uses (first mention), so that the result can be scored.")
@click.option("--concepts", "concepts_path", type=InputFile("hdf5"),
              help="For SCO models: the concept scores (vltools concept-scores); FEATS.h5 is then the context "
                   "features (ignored by a concepts-only model, as --concepts is by a context-only one; refused "
                   "by the other models).")
@click.option("--sentences", "sentences_path", type=InputFile("jsonl"), metavar="GENERATED.jsonl",
              help="For SCO \"ctx + sen\" models: one generated sentence per image (vltools caption of FEATS.h5); "
                   "refused by the other models, which would not read it.")
@batch_size_option(256)
@precision_option()
@device_option()
@click.option("--proxy", "proxy_path", type=InputFile("hdf5"),
              help="rmac: encode the --split images of this proxy (tfidf-proxy), in its order; needed by --with-text.")
@click.option("--first", type=Integer(min=1), help="rmac: only the first N images (e.g. 1k queries).")
@click.option("--with-text", is_flag=True, help="rmac (V+T model): image + its captions queries, "
              "l2norm(phi(image) + theta(tf-idf of its captions)).")
@click.option("--add", "add_words", multiple=True, metavar="WORD",
              help="rmac (V+T model): add theta(WORD) to each query (text modifier); repeatable.")
@click.option("--subtract", "subtract_words", multiple=True, metavar="WORD",
              help="rmac (V+T model): subtract theta(WORD) from each query; repeatable.")
@click.option("--image-size", type=image_side(32), help="rmac: longest image side [the training one].")
@workers_option(0, "rmac, openclip: image decoding processes.")
@resume_option("-o, checkpoint, inputs and options", "embeddings")
@shard_option()
@threads_option()
def command(source: tuple[str, ...], model_path: str, output: str | None, split: str | None, captions_path: str | None,
            concepts_path: str | None, sentences_path: str | None, batch_size: int, precision: str, device: str,
            proxy_path: str | None, first: int | None, with_text: bool, add_words: tuple[str, ...],
            subtract_words: tuple[str, ...], image_size: int | None, workers: int, resume: bool,
            checkpoint_seconds: float, shard: str | None) -> None:
    """Write `/ids` and `/emb`: one l2-normalised vector per image of FEATS.h5 (in file order, or those that
    --captions names), or per caption of the split (in file order, with `/caption_image_ids`).

    `vltools match IMG_EMB.h5 CAP_EMB.h5` searches them. Cross-attention models (sgr, saf) have no standalone
    embeddings and are refused. An rmac checkpoint embeds IMAGES (semantic retrieval); `vltools match
    QUERIES.h5 DATABASE.h5` then ranks images for images. An OpenCLIP model embeds IMAGES (images that cannot be
    decoded are skipped, counted and listed in /failed) or the captions of CAPS.jsonl, as open_clip's own
    encode_image(preprocess(image)) and encode_text(tokenizer(texts)) give them, l2-normalised."""
    from vltools.stages.encode import encode

    encode(source[0] if len(source) == 1 else list(source), model_path, "-" if output is None else output,
           split=split, captions=captions_path, concepts=concepts_path, sentences=sentences_path,
           batch_size=batch_size, precision=precision, device=device, resume=resume,
           checkpoint_seconds=checkpoint_seconds, proxy=proxy_path, first=first, with_text=with_text, add=add_words,
           subtract=subtract_words, image_size=image_size, workers=workers, shard=shard)
