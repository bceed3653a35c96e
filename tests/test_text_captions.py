"""Karpathy-style caption preprocessing: tokens, the count threshold, the length cut, ids both ways."""

from __future__ import annotations

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.io.progress import log as vltools_log
from vltools.text.captions import CaptionPreprocessing, decode
from vltools.text.tokenize import karpathy_tokenize


def test_karpathy_tokens_delete_punctuation():
    assert karpathy_tokenize("A Dog's  black-and-white ball, red.") == ["a", "dogs", "blackandwhite", "ball", "red"]


def test_vocabulary_keeps_words_seen_min_count_times():
    prep = CaptionPreprocessing(min_count=2)
    vocab = prep.build_vocab(["A cat.", "a dog", "the cat!", "one bird"])
    assert vocab.words == ["<pad>", "<start>", "<end>", "<unk>", "a", "cat"]


def test_a_min_count_above_every_word_is_refused_naming_it():
    with pytest.raises(VLToolsError, match=r"holds no word seen at least 1000000 times .*; lower task.min_count$"):
        CaptionPreprocessing(min_count=10**6).build_vocab(["A cat.", "a dog"])


def test_a_min_count_dropping_most_words_warns_naming_it(monkeypatch):
    warnings = []
    monkeypatch.setattr(vltools_log, "warning", lambda message, *args: warnings.append(message % args))
    CaptionPreprocessing(min_count=3).build_vocab(["A red cat.", "a dog", "a bird", "the cat!"])
    assert warnings == ["the vocabulary keeps only 1 of the 6 distinct words of the training captions (those seen at "
                        "least 3 times), 33% of their words: the model will read the rest as <unk>; lower "
                        "task.min_count for data this small, e.g. --set task.min_count=1 keeps 100%"]


def test_encode_cuts_to_max_words_keeps_end_and_pads():
    prep = CaptionPreprocessing(min_count=1, max_words=3)
    vocab = prep.build_vocab(["a b c d e", "b"])
    a, b, c = vocab("a"), vocab("b"), vocab("c")
    tokens = prep.encode(vocab, ["A b, c d e.", "B zebra"])
    assert tokens.tolist() == [[1, a, b, c, 2], [1, b, 3, 2, 0]]
    assert decode(vocab, tokens[:, 1:]) == ["a b c", "b <unk>"]


def test_no_cut_and_config_round_trip():
    prep = CaptionPreprocessing(tokenizer="treebank", min_count=1, max_words=0)
    assert prep.words("one two three, four") == ["one", "two", "three", ",", "four"]
    assert CaptionPreprocessing.from_config({**prep.config(), "other": 1}) == prep
    assert decode(prep.build_vocab(["x"]), torch.tensor([[4, 2, 4]])) == ["x"]


def test_bad_settings():
    with pytest.raises(VLToolsError, match="tokenizer"):
        CaptionPreprocessing(tokenizer="spacy")
    with pytest.raises(VLToolsError, match="min_count"):
        CaptionPreprocessing(min_count=0)


def test_a_huge_caption_is_cut_before_it_is_tokenised():
    """A 20 MB caption was tokenised whole, which NLTK's sentence splitter ended in a regular-expression time-out."""
    assert CaptionPreprocessing("treebank", max_words=5).words("a red cube. " * 2_000_000) == \
        ["a", "red", "cube", ".", "a"]
