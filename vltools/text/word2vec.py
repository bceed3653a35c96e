"""word2vec vectors of caption words trained here (Gordo & Larlus Table 1, "word2vec + FV").

The paper computes the Fisher vector "of the word2vec [48] representations of the captions' words" (Mikolov et al.
2013) and says that all learning in its caption representations is done on its Visual Genome training partition;
it does not say which word vectors it used or what they were trained on. vltools trains them on the training
split's captions with gensim's skip-gram (negative sampling, 5 noise words), the hyper-parameters of
`Word2VecSettings`, or reads given ones (`vltools.io.word2vec`).

Training is deterministic and does not depend on the order of the sentences: they are sorted, then shuffled by a
permutation drawn from the seed, so that the same captions in any file order give the same vectors. One worker
thread, the seed, and a word hash (CRC-32) that does not depend on PYTHONHASHSEED as Python's `hash` does (gensim 4
draws the initial vectors from the seed alone; the hash is its per-word seeding hook, given so that no gensim
version depends on the hash seed). gensim is imported only when training runs.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vltools.io.word2vec import WordVectors


@dataclass(frozen=True)
class Word2VecSettings:
    """Skip-gram settings: `dim` 300 is the published vectors' size, `window` 5 and `min_count` 5 the word2vec tool's
    defaults, `epochs` 5 gensim's (passes over the sentences)."""

    dim: int = 300
    window: int = 5
    epochs: int = 5
    min_count: int = 5
    seed: int = 0


def stable_hash(word: str) -> int:
    """A hash of a word that is the same in every process (gensim's `hashfxn`)."""
    return zlib.crc32(word.encode("utf-8"))


class TooFewWords(ValueError):
    """No word of the training sentences occurs `min_count` times: nothing to train a vector of."""


def train_word2vec(sentences: Sequence[Sequence[str]], settings: Word2VecSettings) -> WordVectors:
    """Skip-gram vectors of the words seen at least `min_count` times in `sentences` (lists of words), whatever
    the sentences' order (see the module's docstring); no such word is TooFewWords."""
    counts = Counter(word for sentence in sentences for word in sentence)
    if not counts or max(counts.values()) < settings.min_count:
        raise TooFewWords(f"no word occurs {settings.min_count} times in the {len(sentences)} training sentences "
                         f"(min count {settings.min_count})")
    from gensim.models import Word2Vec

    ordered = sorted(list(s) for s in sentences)
    shuffled = [ordered[i] for i in np.random.default_rng(settings.seed).permutation(len(ordered))]
    model = Word2Vec(sentences=shuffled, vector_size=settings.dim, window=settings.window,
                     min_count=settings.min_count, epochs=settings.epochs, seed=settings.seed, sg=1, negative=5,
                     workers=1, hashfxn=stable_hash)
    return WordVectors(list(model.wv.index_to_key), np.array(model.wv.vectors, dtype=np.float32))
