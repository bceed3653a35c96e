"""Offline word tokenisation: Treebank tokens (SCAN / SGRAF) and Karpathy's captioning tokens (NeuralTalk2)."""

from __future__ import annotations

import string
from functools import cache

_PUNCTUATION = str.maketrans("", "", string.punctuation)


@cache
def _treebank():
    """NLTK's Treebank tokenizer, imported on first use (nltk takes about a second to import)."""
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def tokenize(text: str) -> list[str]:
    """Lower-case Treebank-style tokens, as `nltk.word_tokenize(text.lower())` gives for one sentence.

    `word_tokenize` first splits sentences with the punkt model, which would need a download; captions
    are single sentences, so the Treebank tokenizer alone gives the same tokens.
    """
    return _treebank().tokenize(text.lower())


def karpathy_tokenize(text: str) -> list[str]:
    """Karpathy's captioning preprocessing (NeuralTalk2 prepro.py): lower case, ASCII punctuation deleted
    (so "dog's" -> "dogs", "black-and-white" -> "blackandwhite"), then split on white space."""
    return text.lower().translate(_PUNCTUATION).split()


TOKENIZERS = {"treebank": tokenize, "karpathy": karpathy_tokenize}
