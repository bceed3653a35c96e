"""`vltools concepts CAPS.jsonl`: SCO's concept vocabulary, the K most frequent concept words of the captions."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import SPLIT, Integer, primary_output
from vltools.errors import VLToolsError
from vltools.io.progress import log
from vltools.text.concepts import TAGGERS, ConceptVocabulary, resolve_tagger


@primary_output("output", stdout=True)
@click.command("concepts")
@click.argument("captions", type=InputFile("jsonl", stdin=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Concepts JSON (default: standard output).")
@click.option("-k", "--k", "k", type=Integer(min=1), default=256, show_default=True,
              help="Vocabulary size K (the most frequent concepts).")
@click.option("--split", type=SPLIT,
              help="Build from the captions of this split [train when the captions have a split field, else every "
                   "caption].")
@click.option("--tagger", type=click.Choice(TAGGERS), default="auto", show_default=True,
              help="nltk: NLTK's POS tagger (its data must be installed); stopwords: the offline function-word "
                   "filter; auto: nltk when installed, else stopwords (with a warning).")
def command(captions: str, output: str | None, k: int, split: str | None, tagger: str) -> None:
    """Write the concept vocabulary of CAPS.jsonl: nouns, verbs, adjectives and numbers of the --split captions,
    Snowball-stemmed (tenses and plurals unified), the K most frequent; the file records the tagger used."""
    from vltools.data.captions import read_split
    from vltools.io.output import text_output
    from vltools.io.provenance import ids_digest, provenance

    chosen = read_split(captions, split, default="train")
    used = resolve_tagger(tagger)
    info = {"provenance": provenance(captions=str(captions), split=chosen.name,
                                     captions_digest=ids_digest(chosen.caption_ids))}
    vocabulary = ConceptVocabulary.build(chosen.captions, k=k, tagger=used, info=info)
    if len(vocabulary) == 0:
        raise VLToolsError(f"{captions}: no concept word (noun, verb, adjective or number) in the {len(chosen)} "
                           f"{chosen.name or 'all'} captions (tagger {used}); give the captions of another --split")
    with text_output(output) as stream:
        vocabulary.save(stream)
    log.info("concepts: %d concepts from %d %s captions (tagger %s)%s", len(vocabulary), len(chosen),
             chosen.name or "all", used,
             f"; only {len(vocabulary)} distinct concept words, fewer than K={k}" if len(vocabulary) < k else "")
