"""SCO's concept vocabulary (section 3.2): nouns, verbs, adjectives and numbers of the training captions.

A caption's concept words are chosen by part of speech: NLTK's averaged-perceptron tagger when its data is
installed (`bin/fetch_nltk_data.sh`), else an offline fallback that keeps every word outside a fixed list of
function words (determiners, pronouns, prepositions, conjunctions, auxiliaries, adverbs of degree). Both
drop the auxiliaries ("is", "are", "has", ...), which the tagger calls verbs but which name nothing visible.
Tenses and plurals are unified by the Snowball English stemmer ("stars" and "star" -> "star", "running" and
"runs" -> "run"); a concept is its stem, shown by its most frequent surface word. The K most frequent stems
(count over all training captions, ties by stem) form the vocabulary; the file records which tagger chose
the words, so a vocabulary built offline is never mistaken for a tagged one.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.bounded import parse_json
from vltools.io.progress import log
from vltools.text.tokenize import tokenize

CONCEPTS_FORMAT = "vltools.concepts"
TAGGERS = ("auto", "nltk", "stopwords")
NLTK_TAGGER = "nltk-averaged-perceptron"
FALLBACK_TAGGER = "stopwords"
KEPT_TAGS = ("NN", "VB", "JJ", "CD")  # prefixes: nouns, verbs, adjectives, numbers
NLTK_RESOURCES = ("taggers/averaged_perceptron_tagger_eng", "taggers/averaged_perceptron_tagger")

AUXILIARIES = frozenset("""
am is are was were be been being has have had having do does did done doing can could may might must shall
should will would 's 're 've 'm 'd
""".split())
# function words the offline fallback drops (its stand-in for the tagger's nouns/verbs/adjectives/numbers)
FUNCTION_WORDS = AUXILIARIES | frozenset("""
a an the this that these those some any each every all both either neither no not none another other such
i me my mine we us our ours you your yours he him his she her hers it its they them their theirs there here
who whom whose which what where when why how whoever whatever
of in on at by for with without within into onto upon from to toward towards over under above below beneath
behind beside besides between among around about across along through throughout near nearby off out up down
after before during since until against via per than like as
and or but nor so yet if then else because while although though whether
very quite rather too also just only even still really almost more most less least much many few several
one's oneself itself themselves himself herself myself ourselves yourself
""".split())
NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten eleven twelve dozen".split())
WORD = re.compile(r"^[a-z0-9][a-z0-9'-]*$")


@cache
def _stemmer():
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer("english")


def normalize(word: str) -> str:
    """The concept key of a word: its Snowball stem (tenses and plurals unified); numbers stay as written."""
    return word if word.isdigit() or word in NUMBER_WORDS else _stemmer().stem(word)


def nltk_tagger_available() -> bool:
    """Whether NLTK's perceptron tagger data is installed (nothing is downloaded)."""
    import nltk

    for resource in NLTK_RESOURCES:
        try:
            nltk.data.find(resource)
            return True
        except LookupError:
            continue
    return False


def resolve_tagger(choice: str) -> str:
    """The tagger to use for `choice` (auto, nltk, stopwords); auto falls back offline and says so once."""
    if choice not in TAGGERS:
        raise VLToolsError(f"--tagger {choice!r}: use one of {', '.join(TAGGERS)}")
    if choice == "stopwords":
        return FALLBACK_TAGGER
    if nltk_tagger_available():
        return NLTK_TAGGER
    if choice == "nltk":
        raise VLToolsError("NLTK's averaged_perceptron_tagger data is not installed; run bin/fetch_nltk_data.sh "
                           "once (needs network), or use --tagger stopwords")
    log.warning("concepts: NLTK's tagger data is not installed (bin/fetch_nltk_data.sh fetches it); "
                "choosing concept words by the offline stop-word filter instead")
    return FALLBACK_TAGGER


def concept_words(tokens: Sequence[str], tagger: str) -> list[str]:
    """The tokens of one caption that are concept words (nouns, verbs, adjectives, numbers), in order."""
    words = [t for t in tokens if WORD.match(t)]
    if tagger == NLTK_TAGGER:
        import nltk

        tagged = nltk.pos_tag(words)
        return [w for w, tag in tagged if tag.startswith(KEPT_TAGS) and w not in AUXILIARIES]
    return [w for w in words if w not in FUNCTION_WORDS or w in NUMBER_WORDS]


@dataclass
class ConceptVocabulary:
    """K concepts (stems) with their display words and training counts, and how the words were chosen."""

    concepts: list[str]
    words: list[str]
    counts: list[int]
    tagger: str
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {c: i for i, c in enumerate(self.concepts)}

    def __len__(self) -> int:
        return len(self.concepts)

    @classmethod
    def build(cls, captions: Iterable[str], k: int = 256, tagger: str = FALLBACK_TAGGER,
              info: dict | None = None) -> ConceptVocabulary:
        """The `k` most frequent concepts of `captions` (fewer when the captions have fewer)."""
        if k < 1:
            raise VLToolsError(f"the concept vocabulary size K must be at least 1, not {k}")
        counts: Counter = Counter()
        surface: dict[str, Counter] = defaultdict(Counter)
        for caption in captions:
            for word in concept_words(tokenize(caption), tagger):
                stem = normalize(word)
                counts[stem] += 1
                surface[stem][word] += 1
        chosen = sorted(counts, key=lambda s: (-counts[s], s))[:k]
        words = [min(surface[s], key=lambda w: (-surface[s][w], w)) for s in chosen]
        return cls(chosen, words, [counts[s] for s in chosen], tagger, dict(info or {}))

    def concepts_of(self, caption: str) -> list[int]:
        """Indices of the vocabulary's concepts in one caption (sorted, each once)."""
        found = {self.index.get(normalize(w)) for w in concept_words(tokenize(caption), self.tagger)}
        return sorted(i for i in found if i is not None)

    def targets(self, image_ids: Sequence[str], captions: Sequence[str],
                caption_image_ids: Sequence[str]) -> np.ndarray:
        """Multi-hot targets [N, K] float32 of `image_ids`: the concepts of all the image's captions.

        An image none of whose captions has a concept word keeps an all-zero row; the log counts them.
        """
        row = {image_id: n for n, image_id in enumerate(image_ids)}
        out = np.zeros((len(image_ids), len(self)), dtype=np.float32)
        empty = 0
        for caption, image_id in zip(captions, caption_image_ids, strict=True):
            if image_id not in row:
                continue
            found = self.concepts_of(caption)
            empty += not found
            out[row[image_id], found] = 1.0
        silent = int((out.sum(1) == 0).sum())
        if empty:
            log.info("concepts: %d caption(s) have no concept word; %d image(s) have an all-zero target",
                     empty, silent)
        return out

    def to_json(self) -> dict:
        return {"format": CONCEPTS_FORMAT, "format_version": 1, "k": len(self), "tagger": self.tagger,
                "normalizer": "snowball-english", **self.info,
                "concepts": [{"concept": c, "word": w, "count": n}
                             for c, w, n in zip(self.concepts, self.words, self.counts, strict=True)]}

    def save(self, stream) -> None:
        json.dump(self.to_json(), stream, indent=1)
        stream.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> ConceptVocabulary:
        """Read a concepts file written by `vltools concepts`."""
        path = Path(path)
        try:
            data = parse_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise VLToolsError(f"{path}: no such concepts file; build it with vltools concepts") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise VLToolsError(f"{path}: not a JSON concepts file ({exc}); build it with vltools concepts") \
                from None
        if not isinstance(data, dict) or data.get("format") != CONCEPTS_FORMAT:
            raise VLToolsError(f"{path}: not a {CONCEPTS_FORMAT} file; build it with vltools concepts")
        try:
            entries = data["concepts"]
            info = {k: v for k, v in data.items() if k not in ("concepts", "format", "format_version", "k",
                                                               "tagger", "normalizer")}
            return cls([e["concept"] for e in entries], [e["word"] for e in entries],
                       [int(e["count"]) for e in entries], str(data["tagger"]), info)
        except (KeyError, TypeError, ValueError) as exc:
            raise VLToolsError(f"{path}: malformed concepts file ({exc.__class__.__name__}: {exc}); rebuild it "
                               "with vltools concepts") from None
