"""`vltools tfidf-proxy`: the caption proxies of semantic similarity (Gordo & Larlus section 4): tf-idf of words or
objects, or word2vec + Fisher vectors."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SEED_RANGE, SPLIT, Integer, output_option, primary_output, threads_option
from vltools.infer.checks import MAX_EM_STARTS, MAX_MIXTURE_COMPONENTS, MAX_WORD_DIM
from vltools.io.progress import log
from vltools.text.fisher import FisherSettings
from vltools.text.tfidf import WORD_COUNTS
from vltools.text.word2vec import Word2VecSettings

W2V, FV = Word2VecSettings(), FisherSettings()
TRAINING = ("dim", "window", "epochs", "min_count")     # word2vec-fv options that configure the vectors' training
FISHER_ONLY = ("word_vectors", "components", "starts", "seed", *TRAINING)
# how often an image's term counts when --words is not given: the paper's "single set of words" for captions, its
# histogram "counting how many objects of each synset" for objects
DEFAULT_WORDS = {"captions": "distinct", "objects": "occurrences", "word2vec-fv": "distinct"}


def check_method(ctx: click.Context, method: str) -> None:
    """word2vec-fv's options given with another method, or training options with --word-vectors: usage errors."""
    given = [name for name in FISHER_ONLY
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    flag = {name: "--" + name.replace("_", "-") for name in given}
    if method != "word2vec-fv" and given:
        raise click.UsageError(f"{flag[given[0]]} is an option of --method word2vec-fv, not {method}")
    trained = [name for name in given if name in TRAINING]
    if "word_vectors" in given and trained:
        raise click.UsageError(f"{flag[trained[0]]} sets the training of word vectors, which --word-vectors replaces")


@primary_output("output", stdout=True)
@click.command("tfidf-proxy")
@click.argument("captions", metavar="CAPS.jsonl", type=InputFile("jsonl", stdin=True))
@output_option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), binary="HDF5",
               help="Proxy HDF5 (default: standard output, never a terminal).")
@click.option("--images", "images_path", type=InputFile("jsonl"),
              help="Images JSONL: every image it lists gets a row (those without captions the zero vector), in its "
                   "order; captions naming other images are an error. Default: the images the captions name.")
@click.option("--method", type=click.Choice(["captions", "objects", "word2vec-fv"]), default="captions",
              show_default=True,
              help="captions: tf-idf of the Snowball-stemmed words of every caption of an image; objects: each caption "
                   "is one object synset (a term of its own, not stemmed), e.g. from Visual Genome objects; "
                   "word2vec-fv: the Fisher vector of the word2vec vectors of all the image's caption words.")
@click.option("--words", "word_counts", type=click.Choice(WORD_COUNTS),
              help="How often an image's word counts: distinct (once: all its captions' words as a single set, "
                   "Gordo & Larlus section 4) or occurrences (once per occurrence). Default: distinct, except "
                   "occurrences for --method objects (the paper counts each synset's objects).")
@click.option("--word-vectors", type=click.Path(dir_okay=False),
              help="word2vec-fv: read the captions' words from this word2vec binary file (e.g. "
                   "GoogleNews-vectors-negative300.bin) instead of training vectors on the training split.")
@click.option("--components", type=Integer(1, MAX_MIXTURE_COMPONENTS), default=FV.components, show_default=True,
              help="word2vec-fv: Gaussians of the mixture (the Fisher vector has 2 x components x dim values).")
@click.option("--starts", type=Integer(1, MAX_EM_STARTS), default=FV.starts, show_default=True,
              help="word2vec-fv: EM starts (seeded k-means++), the mixture of highest likelihood kept.")
@click.option("--dim", type=Integer(1, MAX_WORD_DIM), default=W2V.dim, show_default=True,
              help="word2vec-fv: dimensions of the trained word vectors.")
@click.option("--window", type=Integer(min=1), default=W2V.window, show_default=True,
              help="word2vec-fv: skip-gram context window (words either side).")
@click.option("--epochs", type=Integer(min=1), default=W2V.epochs, show_default=True,
              help="word2vec-fv: training passes over the training split's captions.")
@click.option("--min-count", type=Integer(min=1), default=W2V.min_count, show_default=True,
              help="word2vec-fv: words seen fewer times in the training split get no vector.")
@click.option("--seed", type=SEED_RANGE, default=W2V.seed, show_default=True,
              help="word2vec-fv: seed of the word2vec training (its sentence order) and of the mixture's starts.")
@click.option("--k", type=Integer(min=1), default=32, show_default=True,
              help="Nearest images kept per image, within its split (the relevant set of triplet mining).")
@click.option("--train-split", type=SPLIT, default="train", show_default=True,
              help="The vocabulary and the idf (word2vec-fv: the trained word vectors and the mixture) are fitted "
                   "on this split only.")
@threads_option()
@click.pass_context
def command(ctx: click.Context, captions: str, output: str | None, images_path: str | None, method: str,
            word_counts: str | None, word_vectors: str | None, components: int, starts: int, dim: int, window: int,
            epochs: int, min_count: int, seed: int, k: int, train_split: str) -> None:
    """Write the proxy of CAPS.jsonl (image or region captions, each with a split): one l2-normalised row per image
    over the words of all its captions, each counted once by default (tf-idf with the vocabulary and idf of the
    training split, or the Fisher vector of its words' word2vec vectors), and each image's k nearest images of its
    split. `score semantic` and `mine-triplets` read it."""
    check_method(ctx, method)
    from vltools.data.semantic import build_fisher_proxy, build_proxy, image_texts
    from vltools.io.provenance import ids_digest
    from vltools.io.proxy import write_proxy
    from vltools.io.records import read_records

    records = read_records(captions, "captions")
    images = read_records(images_path, "images") if images_path else None
    ids, splits, texts = image_texts(records, captions, images, images_path)
    word_counts = word_counts or DEFAULT_WORDS[method]
    distinct = word_counts == "distinct"
    settings: dict[str, object] = {}
    if method == "word2vec-fv":
        proxy, settings = build_fisher_proxy(ids, splits, texts, train_split, k,
                                             FisherSettings(components, seed=seed, starts=starts),
                                             Word2VecSettings(dim, window, epochs, min_count, seed), word_vectors,
                                             distinct)
    else:
        proxy = build_proxy(ids, splits, texts, train_split, k, stem=method == "captions", distinct=distinct)
    k = proxy.neighbors.shape[1]
    write_proxy(output, proxy, {"method": method, "words": word_counts, "k": k, "train_split": train_split,
                                "captions": captions, "ids_digest": ids_digest(ids), **settings})
    log.info("tfidf-proxy: %d images, %d %s, k=%d", len(ids), len(proxy.vocab),
             "Fisher vector values" if method == "word2vec-fv" else "stems", k)
