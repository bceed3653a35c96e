"""`vltools score caption|retrieval|semantic|self-retrieval`: metrics JSON on stdout, a readable table on stderr."""

from __future__ import annotations

import logging
import math

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SPLIT, Integer, output_option, primary_output
from vltools.eval import self_retrieval as self_retrieval_eval
from vltools.eval import semantic as semantic_eval
from vltools.io.numbers import dumps
from vltools.io.progress import log


def _finite(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _emit(result: dict, rows: list[tuple[str, ...]]) -> None:
    """The metrics as one JSON line on stdout; the table on stderr unless --quiet."""
    click.echo(dumps(result))
    if log.isEnabledFor(logging.INFO):
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            click.echo("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)), err=True)


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give comma-separated integers", param_hint=option) from None


@click.group("score")
def command() -> None:
    """Score predictions against references: captions, cross-modal retrieval, semantic retrieval, self-retrieval.

    Each subcommand prints one metrics JSON object on standard output and a readable table on standard error.
    """


@primary_output(stdout=True)
@command.command("caption")
@click.argument("predictions", type=InputFile("jsonl", "json", stdin=True))
@click.option("--refs", "refs", required=True, type=InputFile("jsonl", "json", stdin=True),
              help="Reference captions: captions JSONL (image_id), pairs JSONL (pair_id + description) or COCO JSON.")
@click.option("--tokenized", is_flag=True,
              help="The references are already PTB-tokenised (lower case, no punctuation): do not tokenise them "
                   "again. Predictions are always tokenised.")
@click.option("--no-spice", is_flag=True, help="Skip SPICE even when its Stanford CoreNLP models are installed.")
@click.option("--no-meteor", is_flag=True, help="Skip METEOR (its Java process takes seconds to start).")
@click.option("--strict", is_flag=True,
              help="Refuse empty or blank references of predicted ids (exit 1) instead of scoring them as the COCO "
                   "evaluation code does, with a warning counting them.")
@output_option("--per-image", "per_image", type=click.Path(dir_okay=False),
              help="Also write each item's scores as JSONL (keyed like the predictions).")
def caption(predictions: str, refs: str, tokenized: bool, no_spice: bool, no_meteor: bool, strict: bool,
            per_image: str | None) -> None:
    """BLEU-1..4, METEOR, ROUGE-L, CIDEr-D (and SPICE) of PREDICTIONS, as the COCO evaluation server computes them.

    PREDICTIONS: one caption per image (captions JSONL or COCO results JSON) or per pair (pair_id + caption).
    Only the predicted ids are scored; each must have references. An empty reference is scored as the COCO
    server scores it (it matches nothing), with a warning; --strict refuses it. Needs Java (pycocoevalcap's
    tokenizer and METEOR run on it).
    """
    from vltools.data.caption_scores import score_caption_files
    from vltools.io.records import write_records

    scores, key = score_caption_files(predictions, refs, tokenized, not no_spice, not no_meteor, strict)
    if per_image:
        write_records(per_image, ({key: item_id, **{k: _finite(v) for k, v in values.items()}}
                                  for item_id, values in scores.per_item.items()))
    counts = scores.bleu_counts
    skipped = scores.metrics.get("skipped", {})
    rows = [("metric", "score"), *((name, _number(value) if name not in skipped else f"- ({skipped[name]})")
                                   for name, value in scores.metrics.items() if name != "skipped"),
            ("BLEU lengths", f"test {counts['testlen']} ref {counts['reflen']}"),
            ("BLEU correct", " ".join(str(c) for c in counts["correct"]))]
    _emit(scores.metrics, rows)


def _retrieval_rows(result: dict) -> list[tuple[str, ...]]:
    header = ("direction", "R@1", "R@5", "R@10", "medr", "meanr")
    rows = [header]
    for direction in ("i2t", "t2i"):
        values = result[direction]
        rows.append((direction, *(_number(values[k], 1) for k in ("R@1", "R@5", "R@10", "medr", "meanr"))))
    rows.append(("rsum", _number(result["rsum"], 1), "", "", "", ""))
    rows.append(("mR", _number(result["mR"], 1), "", "", "", ""))
    return rows


@primary_output(stdout=True)
@command.command("retrieval")
@click.argument("scores", nargs=-1, required=True, type=InputFile("hdf5", "npy", "jsonl", stdin=True))
@click.option("--captions", type=InputFile("jsonl", stdin=True),
              help="Captions JSONL naming each caption's image: needed for rankings JSONL; for a .npy matrix, its "
                   "rows are the images in order of first mention and its columns the captions.")
@click.option("--protocol", type=click.Choice(["full", "coco1k"]), default="full", show_default=True,
              help="full: all images and captions at once (COCO 5K, Flickr30K 1K); coco1k: mean over folds of "
                   "--fold-size images and their captions, in file order.")
@click.option("--fold-size", type=Integer(min=1), default=1000, show_default=True,
              help="Images per fold for --protocol coco1k.")
@click.option("--split", type=SPLIT,
              help="With --captions: score only the captions of this split [for rankings and sims, the split "
                   "whose captions match ranked; else every caption]. A .npy matrix in the precomp layout names its "
                   "images {split}_{i}, as `convert precomp` does.")
def retrieval(scores: tuple[str, ...], captions: str | None, protocol: str, fold_size: int,
              split: str | None) -> None:
    """R@1/5/10 both ways, medr, meanr, rsum and mR (rsum / 6) from SCORES: a sims HDF5 file, a plain .npy
    images x captions matrix, or a rankings JSONL (with --captions).

    Several matrices (sims HDF5 or .npy) are averaged into an ensemble (SGRAF = sgr_sims.h5 saf_sims.h5); they
    must have the same image and caption ids in the same order. A .npy matrix without --captions must be in the
    precomp layout: n images x 5n captions, the five captions of image i in columns 5i .. 5i + 4 (what the
    released SCAN / SGRAF evaluation saves). Recalls are percentages; ranks are 1-based. For rankings (top-k
    lists) an answer beyond the list counts as not found, and medr / meanr are null when they cannot be known.
    """
    from vltools.data.retrieval import is_matrix, score_retrieval

    if not any(map(is_matrix, scores)):
        if len(scores) > 1:
            raise click.UsageError("rankings JSONL are scored one at a time; ensembles need similarity matrices")
        if captions is None:
            raise click.UsageError("a rankings JSONL needs --captions CAPS.jsonl to know each caption's image")
    result = score_retrieval(scores, captions, protocol, fold_size, split)
    _emit(result, _retrieval_rows(result))


@primary_output(stdout=True)
@command.command("semantic")
@click.argument("model", type=InputFile("hdf5", "jsonl", stdin=True))
@click.option("--proxy", type=InputFile("hdf5"),
              help="Proxy HDF5 (tfidf-proxy): relevance = dot product of its rows (tf-idf, or word2vec + FV). "
                   "Needed for NDCG / PCC.")
@click.option("--R", "r_values", default=",".join(map(str, semantic_eval.DEFAULT_R)), show_default=True,
              help="Comma-separated numbers of retrieved images R for NDCG@R and PCC@R.")
@click.option("--triplets", type=InputFile("jsonl", stdin=True),
              help="User-study triplets JSONL {query, a, b, o1, o2, o3} for the user-agreement score (o1 / o2: "
                   "annotators who chose a / b, o3: neither).")
@output_option("--plot", type=click.Path(dir_okay=False), help="Draw the NDCG@R and PCC@R curves to this PNG file.")
@click.option("--split", type=SPLIT, default="test", show_default=True,
              help="When MODEL is a proxy file (the text oracle): rank the images of this split.")
@click.option("--queries", type=Integer(min=1),
              help="When MODEL is a proxy file: the first N images of the split are the queries [all].")
def semantic(model: str, proxy: str | None, r_values: str, triplets: str | None, plot: str | None, split: str,
             queries: int | None) -> None:
    """Semantic retrieval (Gordo & Larlus): NDCG@R, PCC@R and their AUC against a tf-idf proxy, user agreement.

    MODEL: image-to-image similarities, a sims HDF5 file (rows = query image ids, columns = database image ids)
    or a rankings JSONL with direction i2i (whose database is every image of the proxy file), or a proxy file
    (tfidf-proxy) whose tf-idf similarities rank the --split images (the text oracle). The query is
    removed from its own ranking. All values are percentages; AUC is over a log R axis normalised to [0, 1].
    """
    from vltools.data.semantic_scores import score_semantic_file

    if proxy is None and triplets is None:
        raise click.UsageError("give --proxy for NDCG / PCC, --triplets for user agreement, or both")
    if plot and proxy is None:
        raise click.UsageError("--plot draws the NDCG / PCC curves, which need --proxy")
    result, kept = score_semantic_file(model, proxy, triplets, tuple(_int_list(r_values, "--R")), split, queries,
                                       plot)
    rows: list[tuple[str, ...]] = [("measure", "value")]
    if proxy is not None:
        rows += [(f"NDCG@{r} / PCC@{r}", f"{_number(result['ndcg'][str(r)], 1)} / {_number(result['pcc'][str(r)], 1)}")
                 for r in kept]
        rows += [("NDCG AUC", _number(result["ndcg_auc"], 1)), ("PCC AUC", _number(result["pcc_auc"], 1))]
    if triplets is not None:
        rows.append(("user agreement", f"{_number(result['user_agreement'], 1)} ({result['n_triplets']} triplets)"))
    _emit(result, rows)


@primary_output(stdout=True)
@command.command("self-retrieval")
@click.argument("logp", type=InputFile("hdf5"))
@click.option("--k", "k_text", default=",".join(map(str, self_retrieval_eval.KS)), show_default=True,
              help="Comma-separated K values for top-K recall (capped at the number of images).")
def self_retrieval(logp: str, k_text: str) -> None:
    """Self-retrieval (Dai & Lin 4.1): top-K recall of each generated caption's own image, ranked by log p(c | I).

    LOGP: HDF5 with /logp (n_captions x n_images), /image_ids and /caption_image_ids (or /caption_image_index).
    """
    from vltools.data.caption_scores import score_self_retrieval_file

    ks = tuple(_int_list(k_text, "--k"))
    if not ks or min(ks) < 1:
        raise click.BadParameter("give positive integers", param_hint="--k")
    result = score_self_retrieval_file(logp, ks)
    rows = [("K", "recall")] + [(f"R@{k}", _number(result[f"R@{k}"], 2)) for k in ks]
    rows += [("medr", _number(result["medr"], 1)), ("meanr", _number(result["meanr"], 1))]
    _emit(result, rows)
