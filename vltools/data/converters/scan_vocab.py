"""The vltools vocabulary file and SCAN / SGRAF vocabulary JSON, each convertible to the other.

The vltools vocabulary file is JSON `{"format": "vltools.vocab", "words": [...]}`: word i has index i, with
`<pad>`=0 `<start>`=1 `<end>`=2 `<unk>`=3 (as in SCAN). The SCAN JSON is `{word2idx, idx2word, idx}`.
"""

from __future__ import annotations

import os

from vltools.errors import VLToolsError, input_error
from vltools.io.output import write_json
from vltools.io.sources import load_json
from vltools.text.vocab import Vocabulary

VOCAB_FORMAT = "vltools.vocab"


def vocab_document(vocab: Vocabulary) -> dict:
    """The vltools vocabulary file's content."""
    return {"format": VOCAB_FORMAT, "words": list(vocab.words)}


def read_vocab_file(path: str | os.PathLike) -> Vocabulary:
    """Read a vltools vocabulary file."""
    data = load_json(path)
    if not isinstance(data, dict) or data.get("format") != VOCAB_FORMAT:
        raise input_error(path, None, f"not a vltools vocabulary file (no \"format\": \"{VOCAB_FORMAT}\")",
                          "convert a SCAN vocabulary with `vltools convert scan-vocab`")
    words = data.get("words")
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise input_error(path, "words", "must be a list of strings")
    try:
        return Vocabulary(words)
    except VLToolsError as exc:
        raise input_error(path, "words", str(exc)) from None


def load_vocabulary(path: str | os.PathLike) -> Vocabulary:
    """A vocabulary from either a vltools vocabulary file or a SCAN / SGRAF vocabulary JSON."""
    data = load_json(path)
    if isinstance(data, dict) and "word2idx" in data:
        return Vocabulary.from_scan_json(path)
    return read_vocab_file(path)


def convert_scan_vocab(scan_json: str | os.PathLike, output: str | os.PathLike | None) -> dict[str, int]:
    """`vltools convert scan-vocab`: a SCAN / SGRAF vocabulary JSON as a vltools vocabulary file at `output`
    (None: standard output), same indices; returns {"words": how many}."""
    vocab = Vocabulary.from_scan_json(scan_json)
    write_json(output, vocab_document(vocab))
    return {"words": len(vocab)}


def convert_to_scan_vocab(vocab_file: str | os.PathLike, output: str | os.PathLike | None) -> dict[str, int]:
    """`vltools convert to-scan-vocab`: a vltools vocabulary file as a SCAN vocabulary JSON (word2idx, idx2word,
    idx) at `output` (None: standard output); returns {"words": how many}."""
    vocab = read_vocab_file(vocab_file)
    write_json(output, vocab.to_scan_json())
    return {"words": len(vocab)}
