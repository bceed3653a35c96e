"""`vltools baseline KIND PAIRS.jsonl`: descriptions of pairs that look at no image (L2C Table 1's Most Frequent
and Text-Only rows), from the training split's descriptions."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SEED_RANGE, SPLIT, primary_output
from vltools.io.progress import log
from vltools.text.baselines import BASELINES, baseline_descriptions


@primary_output("output", stdout=True)
@click.command("baseline")
@click.argument("kind", type=click.Choice(BASELINES))
@click.argument("pairs_path", metavar="PAIRS", type=InputFile("jsonl", stdin=True))
@click.option("--split", type=SPLIT, help="Describe the pairs of this split (default: all pairs).")
@click.option("--train-split", type=SPLIT, default="train", show_default=True,
              help="Split whose descriptions the baseline draws from.")
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True, help="Seed of text-only sampling.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Pair descriptions JSONL (default: stdout).")
def command(kind: str, pairs_path: str, split: str | None, train_split: str, seed: int, output: str | None) -> None:
    """One {pair_id, caption} line per pair of PAIRS [--split], in input order: most-frequent gives every pair
    the commonest training description, text-only one sampled from the training descriptions."""
    from vltools.data.l2c import read_pairs
    from vltools.io.records import write_records

    train = read_pairs(pairs_path, train_split, need_descriptions=True, chosen_by="train_split")
    targets = read_pairs(pairs_path, split)
    texts = baseline_descriptions(kind, [text for _, text in train.items()], len(targets), seed)
    written = write_records(output, ({"pair_id": pair, "caption": text}
                                     for pair, text in zip(targets.pair_ids, texts, strict=True)))
    log.info("baseline %s: wrote %d pair descriptions", kind, written)
