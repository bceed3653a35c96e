"""The word vocabulary shared by the text encoders, index-compatible with SCAN / SGRAF vocab JSON."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.io.bounded import parse_json
from vltools.io.progress import log
from vltools.text.tokenize import leading_words, tokenize

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)
# Captions are cut to this many words when encoded: matching memory grows with the square of the longest
# caption (SGR's graph over words), and the released code's data never exceeds a few dozen words. Override
# with the environment variable VLTOOLS_MAX_CAPTION_TOKENS (0: no limit). README, Conventions.
MAX_CAPTION_TOKENS = 100
MAX_TOKENS_VARIABLE = "VLTOOLS_MAX_CAPTION_TOKENS"
# above this share of caption words outside a model's vocabulary, its scores of those captions are mostly about
# <unk> and say little about the words: warn
UNKNOWN_WARNING = 0.05
# below this share of the training captions' words kept by a vocabulary built from them, a model trained on them
# reads much of each caption as <unk> (a count threshold meant for COCO's 400,000 captions keeps a dozen words of a
# few hundred): warn, naming the setting and the largest threshold that keeps this share
KEPT_WARNING = 0.9


def max_caption_tokens() -> int | None:
    """The word limit of encoded captions (None: no limit), from VLTOOLS_MAX_CAPTION_TOKENS or the default."""
    text = os.environ.get(MAX_TOKENS_VARIABLE, "").strip()
    if not text:
        return MAX_CAPTION_TOKENS
    if not text.isdigit():
        raise VLToolsError(f"{MAX_TOKENS_VARIABLE}={text!r}: give a whole number of words (0: no limit)")
    return int(text) or None


@dataclass
class Coverage:
    """How many words of the captions encoded (`Vocabulary.encode(..., coverage=)`) the vocabulary lacks: each of
    them reads as `<unk>`, so a model sees little of captions that are mostly such words."""

    words: int = 0
    unknown: Counter = field(default_factory=Counter)

    def share(self) -> float:
        """The share of encoded words outside the vocabulary (0 when nothing was encoded)."""
        return sum(self.unknown.values()) / self.words if self.words else 0.0

    def report(self, model: str) -> None:
        """One info line with the share; above UNKNOWN_WARNING, one warning line with the three commonest words."""
        missing = sum(self.unknown.values())
        log.info("caption words outside the vocabulary of %s: %.1f%% (%d of %d)", model, 100 * self.share(),
                 missing, self.words)
        if self.share() > UNKNOWN_WARNING:
            examples = ", ".join(repr(word) for word, _ in self.unknown.most_common(3))
            log.warning("%.0f%% of the caption words are outside the vocabulary of %s (e.g. %s): it reads each as "
                        "<unk>, so its scores of these captions probably mean little; use a model whose vocabulary "
                        "holds words like these (its training log says how much of its own captions it kept)",
                        100 * self.share(), model, examples)


def kept_words(counts: Counter, threshold: int) -> list[str]:
    """The counted words seen at least `threshold` times, in order of first count, the specials left out."""
    return [word for word, n in counts.items() if n >= threshold and word not in SPECIALS]


def kept_share(counts: Counter, threshold: int) -> float:
    """The share of the counted words (every occurrence) that are seen at least `threshold` times."""
    total = sum(counts.values())
    return sum(counts[word] for word in kept_words(counts, threshold)) / total if total else 1.0


def report_kept(counts: Counter, threshold: int, setting: str) -> None:
    """One info line with the size of a vocabulary built from captions whose words are `counts` (those seen at least
    `threshold` times) and the share of the captions' words it keeps; below KEPT_WARNING, a warning naming
    `setting` and the largest threshold that would keep that share (a threshold of 1 keeps every word)."""
    share = kept_share(counts, threshold)
    size = len(kept_words(counts, threshold))
    log.info("vocabulary: %d of the %d distinct words of the training captions (those seen at least %d times, "
             "%s), %.1f%% of their %d words", size, len(counts), threshold, setting, 100 * share, sum(counts.values()))
    if share >= KEPT_WARNING:
        return
    lower = next((t for t in range(threshold - 1, 0, -1) if kept_share(counts, t) >= KEPT_WARNING), 1)
    log.warning("the vocabulary keeps only %d of the %d distinct words of the training captions (those seen at least "
                "%d times), %.0f%% of their words: the model will read the rest as <unk>; lower %s for data this "
                "small, e.g. --set %s=%d keeps %.0f%%", size, len(counts), threshold, 100 * share, setting, setting,
                lower, 100 * kept_share(counts, lower))


class Vocabulary:
    """Words by index: `<pad>`=0, `<start>`=1, `<end>`=2, `<unk>`=3, then the corpus words."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.truncated = 0
        self.index = {word: i for i, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise VLToolsError("vocabulary has a repeated word")
        for position, special in enumerate(SPECIALS):
            if self.index.get(special) != position:
                raise VLToolsError(f"vocabulary must have {special} at index {position}")

    @classmethod
    def build(cls, captions: Iterable[str], threshold: int = 4,
              tokenizer: Callable[[str], list[str]] = tokenize, setting: str = "task.vocab_threshold") -> Vocabulary:
        """Words seen at least `threshold` times, in order of first appearance (SCAN's build_vocab). None (only the
        specials: every caption would be `<unk>`, a model trained on nothing) is refused, naming `setting` (the
        training setting that gave `threshold`); what the vocabulary keeps is logged (`report_kept`). The words an
        encoded caption can hold are counted (`max_caption_tokens`, as `encode` cuts them), so that a huge caption
        is not tokenised whole."""
        counts = Counter()
        limit = max_caption_tokens()
        for caption in captions:
            counts.update(tokenizer(caption if limit is None else leading_words(caption, limit)))
        words = kept_words(counts, threshold)
        if not words:
            most = max(counts.values(), default=0)
            raise VLToolsError(f"the vocabulary built from the training captions holds no word seen at least "
                               f"{threshold} times (the most frequent is seen {most} times); lower {setting}")
        report_kept(counts, threshold, setting)
        return cls([*SPECIALS, *words])

    def __len__(self) -> int:
        return len(self.words)

    def __call__(self, word: str) -> int:
        return self.index.get(word, self.index[UNK])

    def encode(self, caption: str, max_tokens: int | None = None,
               tokenizer: Callable[[str], list[str]] = tokenize, coverage: Coverage | None = None) -> list[int]:
        """Token ids of a caption wrapped in `<start> ... <end>`, its words (by `tokenizer`) cut to `max_tokens`
        (default: `max_caption_tokens()`); `self.truncated` counts the captions cut, `coverage` (when given) the
        words encoded and those outside the vocabulary."""
        limit = max_tokens or max_caption_tokens()
        words = tokenizer(caption if limit is None else leading_words(caption, limit))
        if limit is not None and len(words) > limit:
            words = words[:limit]
            self.truncated += 1
        if coverage is not None:
            coverage.words += len(words)
            coverage.unknown.update(word for word in words if word not in self.index)
        return [self.index[START], *(self(w) for w in words), self.index[END]]

    def encode_all(self, captions: Iterable[str], max_tokens: int | None = None,
                   coverage: Coverage | None = None) -> list[list[int]]:
        """`encode` each caption (counting into `coverage` when given); warn once, with the count, when some were
        cut to the word limit."""
        before = self.truncated
        encoded = [self.encode(caption, max_tokens, coverage=coverage) for caption in captions]
        if self.truncated > before:
            limit = max_tokens or max_caption_tokens()
            log.warning("%d captions longer than %d words were cut to %d words (set %s to change the limit)",
                        self.truncated - before, limit, limit, MAX_TOKENS_VARIABLE)
        return encoded

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
            data = parse_json(Path(path).read_text(encoding="utf-8"))
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
