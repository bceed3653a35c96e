"""Offline word tokenisation: Karpathy's captioning tokens (NeuralTalk2, `karpathy_tokenize`) and tokens
compatible with the SCAN / SGRAF preprocessing, `nltk.word_tokenize(caption.lower())` (`tokenize`).

`word_tokenize` first splits the text into sentences with NLTK's punkt model, then runs the Treebank
tokenizer on each sentence; the Treebank tokenizer splits off only a sentence's final period, so
"a dog runs. it is wet." gives "runs" "." only because of the sentence split. The punkt model is a
download (`nltk.download("punkt_tab")`, which `bin/fetch_sgraf_models.sh` does). When it is installed
it is used; otherwise the offline rule below splits sentences the way punkt does on lower-case
captions:

- the punkt algorithm itself (NLTK's `PunktSentenceTokenizer`: its word tokens and its candidate
  sentence ends, a `.`, `?` or `!` followed by white space and another token, or by other punctuation),
- with the abbreviations of `ABBREVIATIONS` in place of the trained English model's list: a period
  after one of them ends no sentence. The list holds the abbreviations that the released SGRAF
  vocabularies keep glued to their period (ave., dr., mr., mrs., st., u.s., j.p.) and common titles;
- a period after a single letter (an initial, "the letter a.") or a number ends no sentence: with
  lower-case text and a lower-case next word, punkt's orthographic heuristic decides so too.

On lower-case captions the trained model differs from this rule only on abbreviations missing from
the list (such a period then splits off as "." where punkt keeps "xyz.").
"""

from __future__ import annotations

import importlib
import string
import sys
from functools import cache
from typing import Literal

from vltools.errors import VLToolsError

Splitter = Literal["auto", "punkt", "rule"]

# abbreviations (lower case, without the final period) after which the offline rule never splits
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "st", "ave", "jr", "sr", "vs", "inc", "co", "corp", "ltd", "mt", "ft", "prof",
    "u.s", "u.k", "j.p", "e.g", "i.e", "a.m", "p.m", "no",
})

RULE_NAME = "rule+treebank"     # the offline rule's name, recorded in checkpoints
PUNKT_NAME = "punkt+treebank"   # nltk.word_tokenize with the punkt English model

_PUNCTUATION = str.maketrans("", "", string.punctuation)


@cache
def _nltk_tokenize():
    """`nltk.tokenize`, imported on first use (nltk takes about a second to import). Importing nltk imports
    scipy.stats for one collocation measure's Fisher test, which tokenising never runs and which is 0.7 s of that
    second: unless scipy.stats is loaded already, nltk is imported with it absent (nltk then leaves that measure
    unimplemented), and a later import of scipy.stats loads it as usual."""
    absent = "scipy.stats" not in sys.modules
    if absent:
        sys.modules["scipy.stats"] = None     # an import of it raises ImportError, which nltk expects
    try:
        return importlib.import_module("nltk.tokenize")
    finally:
        if absent and sys.modules.get("scipy.stats", "") is None:
            del sys.modules["scipy.stats"]


@cache
def _treebank():
    """NLTK's (improved) Treebank tokenizer."""
    return _nltk_tokenize().NLTKWordTokenizer()


@cache
def _punkt():
    """The punkt English sentence splitter, or None when its data (punkt_tab) is not installed."""
    try:
        return _nltk_tokenize().PunktTokenizer("english")
    except LookupError:
        return None


@cache
def _rule():
    """The offline sentence rule: punkt's algorithm with `ABBREVIATIONS` and no trained statistics."""
    punkt = _nltk_tokenize().punkt
    params = punkt.PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    return punkt.PunktSentenceTokenizer(params)


def tokenizer_name(splitter: Splitter = "auto") -> str:
    """Which tokenizer `tokenize(..., splitter)` runs: PUNKT_NAME or RULE_NAME ("auto": punkt when installed)."""
    if splitter == "punkt" or splitter == "auto" and _punkt() is not None:
        return PUNKT_NAME
    return RULE_NAME


def tokenize(text: str, splitter: Splitter = "auto") -> list[str]:
    """Lower-case tokens as `nltk.word_tokenize(text.lower())` gives: sentences split, then Treebank on each.

    `splitter`: "punkt" (needs the punkt_tab data), "rule" (the offline rule of
    the module docstring) or "auto" (punkt when installed, else the rule).
    """
    sentences = _sentence_splitter(splitter).tokenize(text.lower())
    treebank = _treebank()
    return [token for sentence in sentences for token in treebank.tokenize(sentence)]


def _sentence_splitter(splitter: Splitter):
    if tokenizer_name(splitter) == RULE_NAME:
        return _rule()
    punkt = _punkt()
    if punkt is None:
        raise VLToolsError("the punkt sentence model is not installed; run `python -m nltk.downloader punkt_tab` "
                           "(or bin/fetch_sgraf_models.sh), or use the offline rule")
    return punkt


def leading_words(text: str, tokens: int) -> str:
    """What of `text` gives its first `tokens` tokens by either tokenizer: its first 2 * tokens + 1 white-space
    separated words (each gives a token or more, and the ones after the cut give the sentence context of the last
    kept), or all of it. Captions cut to a length are cut to this before they are tokenised, so that a huge caption
    (20 MB) is not tokenised whole, which NLTK's sentence splitter ends in a regular-expression time-out."""
    words = 2 * tokens + 1
    parts = text.split(maxsplit=words)
    return text if len(parts) <= words else " ".join(parts[:words])


def karpathy_tokenize(text: str) -> list[str]:
    """Karpathy's captioning preprocessing (NeuralTalk2 prepro.py): lower case, ASCII punctuation deleted
    (so "dog's" -> "dogs", "black-and-white" -> "blackandwhite"), then split on white space."""
    return text.lower().translate(_PUNCTUATION).split()


TOKENIZERS = {"treebank": tokenize, "karpathy": karpathy_tokenize}
