"""Offline word tokenisation compatible with the SCAN / SGRAF preprocessing."""

from __future__ import annotations

from functools import cache


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
