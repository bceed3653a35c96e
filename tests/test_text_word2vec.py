"""word2vec training: the same vectors in every process (whatever PYTHONHASHSEED) and whatever the order of the
sentences, and words of the same contexts closer than words of other contexts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vltools.text.word2vec import Word2VecSettings, train_word2vec

SETTINGS = Word2VecSettings(dim=16, window=2, epochs=40, min_count=1, seed=1)


def corpus() -> list[list[str]]:
    """Animals chase, vehicles are driven: 'cat' and 'dog' share contexts, 'car' and 'truck' share others."""
    rng = np.random.default_rng(0)
    sentences = []
    for _ in range(300):
        animal, vehicle = rng.choice(["cat", "dog"]), rng.choice(["car", "truck"])
        sentences.append(["the", animal, "chased", "a", rng.choice(["ball", "mouse", "bird"])])
        sentences.append(["she", "drove", "the", vehicle, rng.choice(["fast", "home", "away"])])
    return sentences


TRAIN = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_text_word2vec import SETTINGS, corpus
from vltools.text.word2vec import train_word2vec
vectors = train_word2vec(corpus(), SETTINGS)
print(json.dumps({{"words": vectors.words, "vectors": vectors.vectors.tolist()}}))
"""


def test_training_is_the_same_under_any_hash_seed():
    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run([sys.executable, "-c", TRAIN], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout))
    assert runs[0]["words"] == runs[1]["words"] and len(runs[0]["words"]) == 15
    np.testing.assert_array_equal(runs[0]["vectors"], runs[1]["vectors"])
    assert np.abs(np.array(runs[0]["vectors"])).max() > 0


def test_the_sentences_order_does_not_change_the_vectors_but_the_seed_does():
    sentences = corpus()
    vectors = train_word2vec(sentences, SETTINGS)
    for order in (sentences[::-1], [sentences[i] for i in np.random.default_rng(5).permutation(len(sentences))]):
        again = train_word2vec(order, SETTINGS)
        assert again.words == vectors.words
        np.testing.assert_array_equal(again.vectors, vectors.vectors)
    other = train_word2vec(sentences, Word2VecSettings(dim=16, window=2, epochs=40, min_count=1, seed=2))
    assert not np.allclose(other.vectors, vectors.vectors)


def test_words_of_the_same_contexts_are_closer():
    vectors = train_word2vec(corpus(), SETTINGS)
    row = {word: v / np.linalg.norm(v) for word, v in zip(vectors.words, vectors.vectors, strict=True)}
    assert vectors.dim == 16
    assert row["cat"] @ row["dog"] > max(row["cat"] @ row["car"], row["cat"] @ row["truck"]) + 0.2
    assert row["car"] @ row["truck"] > max(row["car"] @ row["cat"], row["car"] @ row["dog"]) + 0.2


def test_min_count_keeps_frequent_words_and_refuses_a_corpus_without_any():
    vectors = train_word2vec([["a", "b", "a"], ["a", "c"]], Word2VecSettings(dim=4, min_count=3))
    assert vectors.words == ["a"]
    with pytest.raises(ValueError, match="no word occurs 4 times"):
        train_word2vec([["a", "b", "a"], ["a", "c"]], Word2VecSettings(dim=4, min_count=4))

