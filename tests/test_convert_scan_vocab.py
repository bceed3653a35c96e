"""`vltools convert scan-vocab` / `to-scan-vocab` keep every index of the real SCAN / SGRAF Flickr30K vocabulary."""

from __future__ import annotations

import json

import pytest
from convert_cli import DATA, convert

from vltools.data.converters.scan_vocab import load_vocabulary, read_vocab_file
from vltools.errors import VLToolsError

SCAN = DATA / "scan_vocab" / "f30k_precomp_vocab.json"


def test_scan_to_vltools_and_back_keeps_every_index(tmp_path):
    raw = json.loads(SCAN.read_text())
    ours, back = tmp_path / "vocab.json", tmp_path / "scan.json"
    convert("scan-vocab", SCAN, "-o", ours)
    document = json.loads(ours.read_text())
    assert document["format"] == "vltools.vocab"
    assert len(document["words"]) == len(raw["word2idx"]) == 8481
    assert all(document["words"][index] == word for word, index in raw["word2idx"].items())
    assert all(document["words"][int(index)] == word for index, word in raw["idx2word"].items())
    convert("to-scan-vocab", ours, "-o", back)
    assert json.loads(back.read_text()) == raw


def test_load_vocabulary_reads_both_formats(tmp_path):
    ours = tmp_path / "vocab.json"
    convert("scan-vocab", SCAN, "-o", ours)
    raw = json.loads(SCAN.read_text())
    for path in (SCAN, ours):
        vocab = load_vocabulary(path)
        assert all(vocab(word) == index for word, index in raw["word2idx"].items())


def test_not_a_vocabulary_file(tmp_path, vltools_cmd):
    path = tmp_path / "words.json"
    path.write_text(json.dumps({"words": ["a"]}))
    with pytest.raises(VLToolsError, match="words.json: not a vltools vocabulary file"):
        read_vocab_file(path)
    path.write_text(json.dumps({"format": "vltools.vocab", "words": ["<pad>", "<end>", "<start>", "<unk>"]}))
    result = vltools_cmd("convert", "to-scan-vocab", path, "-o", tmp_path / "scan.json")
    assert result.returncode == 1 and "words.json: words: vocabulary must have <start> at index 1" in \
        result.stderr.decode()
    assert not (tmp_path / "scan.json").exists()
