"""Caption preprocessing for captioners: Karpathy-style words, the vocabulary, and id tensors both ways.

Usage (what the captioning, L2C and SCO trainers share)::

    prep = CaptionPreprocessing()                     # karpathy tokens, min_count 5, max_words 16
    vocab = prep.build_vocab(train_captions)          # <pad>=0 <start>=1 <end>=2 <unk>=3, then the words
    tokens = prep.encode(vocab, ["A dog runs."])      # LongTensor [B, L]: <start> w1 .. wn <end> <pad> ..
    inputs, targets = tokens[:, :-1], tokens[:, 1:]   # teacher forcing: predict targets (pads masked)
    texts = decode(vocab, generated)                  # words up to the first <end>

The defaults are NeuralTalk2's prepro.py habits: lower case, punctuation deleted, words seen at least
`min_count` times in the training captions (others become `<unk>`), captions cut to `max_words` words
(the `<end>` token is always kept after the cut). `config()` / `from_config()` store the settings in a
checkpoint next to the vocabulary, so decoding and scoring use the same preprocessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch

from vltools.errors import VLToolsError
from vltools.text.tokenize import TOKENIZERS, leading_words
from vltools.text.vocab import Vocabulary


@dataclass(frozen=True)
class CaptionPreprocessing:
    """How caption text becomes token ids: tokenizer name, vocabulary count threshold, length cut."""

    tokenizer: str = "karpathy"   # "karpathy" (punctuation deleted) or "treebank" (SCAN's NLTK tokens)
    min_count: int = 5            # words seen fewer times in the training captions map to <unk>
    max_words: int = 16           # words kept per caption (0: no cut)

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise VLToolsError(f"unknown caption tokenizer {self.tokenizer!r}; choose one of {', '.join(TOKENIZERS)}")
        if self.min_count < 1 or self.max_words < 0:
            raise VLToolsError(f"caption preprocessing needs min_count >= 1 and max_words >= 0, not "
                               f"{self.min_count} and {self.max_words}")

    def words(self, caption: str) -> list[str]:
        """The caption's words after tokenising and the length cut."""
        text = leading_words(caption, self.max_words) if self.max_words else caption
        return TOKENIZERS[self.tokenizer](text)[:self.max_words or None]

    def build_vocab(self, captions: Iterable[str]) -> Vocabulary:
        """Words seen at least `min_count` times in `captions` (counted before the length cut)."""
        return Vocabulary.build(captions, threshold=self.min_count, tokenizer=TOKENIZERS[self.tokenizer],
                                setting="task.min_count")

    def encode_one(self, vocab: Vocabulary, caption: str) -> list[int]:
        """`<start> w1 .. wn <end>` ids of one caption."""
        return vocab.encode(caption, self.max_words or None, tokenizer=TOKENIZERS[self.tokenizer])

    def encode(self, vocab: Vocabulary, captions: Sequence[str]) -> torch.Tensor:
        """LongTensor [B, L] of `<start> w1 .. wn <end>` right-padded with `<pad>` (0), in the given order."""
        return pad_tokens([self.encode_one(vocab, c) for c in captions])[0]

    def config(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_config(cls, config: dict) -> CaptionPreprocessing:
        return cls(**{k: config[k] for k in ("tokenizer", "min_count", "max_words") if k in config})


def decode(vocab: Vocabulary, tokens: torch.Tensor) -> list[str]:
    """The text of each row of `tokens` [B, L]: words up to the first `<end>`, `<start>`/`<pad>` dropped."""
    return [vocab.decode(row) for row in tokens.tolist()]


def pad_tokens(token_lists: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens LongTensor[B, L] right-padded with 0, lengths LongTensor[B]) in the given order."""
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.long)
    tokens = torch.zeros(len(token_lists), int(lengths.max()) if len(token_lists) else 0, dtype=torch.long)
    for row, ids in enumerate(token_lists):
        tokens[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return tokens, lengths
