"""`vltools encode`: image or caption embeddings of a separable model, for search over large galleries."""

from __future__ import annotations

import click

from vltools.commands.options import (
    Integer,
    batch_size_option,
    device_option,
    image_side,
    output_option,
    precision_option,
    workers_option,
)
from vltools.devices import resolve_device
from vltools.io.progress import log


@click.command("encode")
@click.argument("source", metavar="FEATS.h5|CAPS.jsonl|IMAGES", type=click.Path(allow_dash=True))
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), metavar="CKPT",
              help="A separable checkpoint (vse on features or captions; rmac on images: an images JSONL, folder "
                   "or list).")
@output_option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), binary="HDF5",
               help="Embeddings HDF5 (default: standard output, never a terminal).")
@click.option("--split", help="For captions: encode this split [test when the captions have a split field, else "
              "every caption]; for rmac with --proxy: the images of this split [test].")
@click.option("--captions", "captions_path", type=click.Path(dir_okay=False),
              help="For images: encode only the images that the --split captions of this JSONL name, in the "
                   "order `vltools match` uses (first mention), so that the result can be scored.")
@click.option("--concepts", "concepts_path", type=click.Path(dir_okay=False),
              help="For SCO models: the concept scores (vltools concept-scores); FEATS.h5 is then the context "
                   "features (ignored by a concepts-only model, as --concepts is by a context-only one).")
@click.option("--sentences", "sentences_path", type=click.Path(dir_okay=False), metavar="GENERATED.jsonl",
              help="For SCO \"ctx + sen\" models: one generated sentence per image (vltools caption of FEATS.h5); "
                   "ignored by the other models.")
@batch_size_option(256)
@precision_option()
@device_option()
@click.option("--proxy", "proxy_path", type=click.Path(dir_okay=False),
              help="rmac: encode the --split images of this proxy (tfidf-proxy), in its order; needed by --with-text.")
@click.option("--first", type=Integer(min=1), help="rmac: only the first N images (e.g. 1k queries).")
@click.option("--with-text", is_flag=True, help="rmac (V+T model): image + its captions queries, "
              "l2norm(phi(image) + theta(tf-idf of its captions)).")
@click.option("--add", "add_words", multiple=True, metavar="WORD",
              help="rmac (V+T model): add theta(WORD) to each query (text modifier); repeatable.")
@click.option("--subtract", "subtract_words", multiple=True, metavar="WORD",
              help="rmac (V+T model): subtract theta(WORD) from each query; repeatable.")
@click.option("--image-size", type=image_side(32), help="rmac: longest image side [the training one].")
@workers_option(0, "rmac: image decoding processes.")
def command(source: str, model_path: str, output: str | None, split: str | None, captions_path: str | None,
            concepts_path: str | None, sentences_path: str | None, batch_size: int, precision: str, device: str,
            proxy_path: str | None, first: int | None, with_text: bool, add_words: tuple[str, ...],
            subtract_words: tuple[str, ...], image_size: int | None, workers: int) -> None:
    """Write `/ids` and `/emb`: one l2-normalised vector per image of FEATS.h5 (in file order, or those that
    --captions names), or per caption of the split (in file order, with `/caption_image_ids`).

    `vltools match IMG_EMB.h5 CAP_EMB.h5` searches them. Cross-attention models (sgr, saf) have no standalone
    embeddings and are refused. An rmac checkpoint embeds IMAGES (semantic retrieval); `vltools match
    QUERIES.h5 DATABASE.h5` then ranks images for images."""
    from vltools.data.blocks import CaptionBlocks, FeatureBlocks
    from vltools.data.captions import DEFAULT_SPLIT, check_images, read_split
    from vltools.data.sco import VectorBlocks, check_split_images, model_vectors
    from vltools.infer.embed import embed_blocks, require_separable
    from vltools.infer.loader import check_features, hdf5_kind, load_model
    from vltools.infer.rmac import QueryOptions, encode_rmac
    from vltools.io.embeddings import write_embeddings
    from vltools.io.features import FeaturesReader
    from vltools.io.provenance import ids_digest

    loaded = load_model(model_path, "encodable")
    if loaded.name == "rmac":
        options = QueryOptions(proxy_path, split or DEFAULT_SPLIT, first, with_text, add_words, subtract_words,
                               image_size, batch_size, workers)
        ids, emb, attrs = encode_rmac(loaded, source, options, resolve_device(device))
        write_embeddings(output, ids, [emb], {"model": "rmac", "checkpoint": model_path,
                                              "checkpoint_digest": loaded.digest, "source": source,
                                              "ids_digest": ids_digest(ids), **attrs})
        log.info("encoded %d images (%s) with rmac", len(ids), attrs["query"])
        return
    require_separable(loaded.model, loaded.name, model_path)
    chosen_device = resolve_device(device)
    loaded.model.to(chosen_device)
    attrs = {"model": loaded.name, "checkpoint": model_path, "checkpoint_digest": loaded.digest, "source": source,
             "precision": precision}
    if hdf5_kind(source) is not None and getattr(loaded.model, "inputs", "regions") == "global":
        vectors = model_vectors(loaded.config, source, concepts_path, sentences_path, loaded.vocab)
        ids = vectors.readers[0 if vectors.readers[0] is not None else 1].ids
        if captions_path is not None:
            chosen = read_split(captions_path, split)
            for path in vectors.paths:
                if path is not None:
                    check_split_images(chosen, path, captions_path)
            ids = chosen.image_ids
        if vectors.sentences is not None:
            vectors.sentences.check(ids, captions_path or source)
        blocks = VectorBlocks(vectors, ids, batch_size)
        write_embeddings(output, ids, embed_blocks(loaded.model, blocks, "images", chosen_device, precision),
                         {**attrs, "side": "images", "concepts": concepts_path or "",
                          "sentences": sentences_path or "", "ids_digest": ids_digest(ids)})
        vectors.close()
        count = len(ids)
    elif hdf5_kind(source) is not None:
        ids = None
        if captions_path is not None:
            chosen = read_split(captions_path, split)
            check_images(chosen, source, captions_path)
            ids = chosen.image_ids
        with FeaturesReader(source) as reader:
            check_features(reader, [loaded])
            ids = reader.ids if ids is None else ids
            blocks = FeatureBlocks(reader, ids, batch_size)
            write_embeddings(output, ids, embed_blocks(loaded.model, blocks, "images", chosen_device, precision),
                             {**attrs, "side": "images", "ids_digest": ids_digest(ids)})
            count = len(ids)
    else:
        chosen = read_split(source, split)
        blocks = CaptionBlocks(loaded.tokenize(chosen.captions), batch_size)
        write_embeddings(output, chosen.caption_ids,
                         embed_blocks(loaded.model, blocks, "captions", chosen_device, precision),
                         {**attrs, "side": "captions", "split": chosen.name,
                          "ids_digest": ids_digest(chosen.caption_ids)},
                         caption_image_ids=[chosen.image_ids[i] for i in chosen.caption_image_index])
        count = len(chosen.caption_ids)
    log.info("encoded %d %s with %s", count, "images" if hdf5_kind(source) is not None else "captions", loaded.name)

