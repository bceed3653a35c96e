"""The word vocabulary shared by the text encoders, index-compatible with SCAN / SGRAF vocab JSON."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.text.tokenize import tokenize

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)


class Vocabulary:
    """Words by index: `<pad>`=0, `<start>`=1, `<end>`=2, `<unk>`=3, then the corpus words."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.index = {word: i for i, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise VLToolsError("vocabulary has a repeated word")
        for position, special in enumerate(SPECIALS):
            if self.index.get(special) != position:
                raise VLToolsError(f"vocabulary must have {special} at index {position}")

    @classmethod
    def build(cls, captions: Iterable[str], threshold: int = 4,
              tokenizer: Callable[[str], list[str]] = tokenize) -> Vocabulary:
        """Words seen at least `threshold` times, in order of first appearance (SCAN's build_vocab)."""
        counts = Counter()
        for caption in captions:
            counts.update(tokenizer(caption))
        return cls([*SPECIALS, *(w for w, n in counts.items() if n >= threshold and w not in SPECIALS)])

    def __len__(self) -> int:
        return len(self.words)

    def __call__(self, word: str) -> int:
        return self.index.get(word, self.index[UNK])

    def encode(self, caption: str, tokenizer: Callable[[str], list[str]] = tokenize,
               max_words: int | None = None) -> list[int]:
        """Token ids of a caption wrapped in `<start> ... <end>`, keeping its first `max_words` words."""
        words = tokenizer(caption)[:max_words]
        return [self.index[START], *(self(w) for w in words), self.index[END]]

    def decode(self, ids: Iterable[int]) -> str:
        """The words of `ids`, stopping at `<end>` and dropping `<start>` and `<pad>`."""
        words = []
        for i in ids:
            word = self.words[int(i)]
            if word == END:
                break
            if word not in (PAD, START):
                words.append(word)
        return " ".join(words)

    @classmethod
    def from_scan_json(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a SCAN / SGRAF vocabulary JSON (`word2idx`, `idx2word`, `idx`), keeping every index."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            word2idx = data["word2idx"]
        except FileNotFoundError:
            raise VLToolsError(f"{path}: no such vocabulary file") from None
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise VLToolsError(f"{path}: not a SCAN vocabulary JSON ({exc.__class__.__name__}: {exc}); "
                               "expected keys word2idx, idx2word, idx") from None
        size = len(word2idx)
        words: list[str | None] = [None] * size
        for word, idx in word2idx.items():
            if not isinstance(idx, int) or not 0 <= idx < size or words[idx] is not None:
                raise VLToolsError(f"{path}: word {word!r} has index {idx!r}; indices must be 0..{size - 1}, "
                                   "each used once")
            words[idx] = word
        return cls(words)

    def to_scan_json(self) -> dict:
        """The SCAN / SGRAF layout: word2idx, idx2word (string keys, as json.dump writes them), idx."""
        return {"word2idx": dict(self.index), "idx2word": {str(i): w for i, w in enumerate(self.words)},
                "idx": len(self.words)}
