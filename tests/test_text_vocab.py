import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.progress import log as vltools_log
from vltools.text.tokenize import tokenize
from vltools.text.vocab import MAX_CAPTION_TOKENS, MAX_TOKENS_VARIABLE, Vocabulary


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("A Dog's ball, red.") == ["a", "dog", "'s", "ball", ",", "red", "."]


def test_build_keeps_words_at_threshold_in_first_seen_order():
    vocab = Vocabulary.build(["b a", "a b", "a c", "b a"], threshold=3)
    assert vocab.words == ["<pad>", "<start>", "<end>", "<unk>", "b", "a"]
    assert vocab.encode("A b zebra") == [1, 5, 4, 3, 2]
    assert vocab.decode([1, 5, 4, 3, 2, 4]) == "a b <unk>"


def test_scan_json_round_trip_preserves_indices(tmp_path):
    words = ["<pad>", "<start>", "<end>", "<unk>", "dog", "cat"]
    data = {"word2idx": {w: i for i, w in enumerate(words)}, "idx2word": {str(i): w for i, w in enumerate(words)},
            "idx": 6}
    (tmp_path / "v.json").write_text(json.dumps(data))
    vocab = Vocabulary.from_scan_json(tmp_path / "v.json")
    assert vocab("cat") == 5
    assert vocab.to_scan_json() == data


def test_bad_vocab_files(tmp_path):
    (tmp_path / "v.json").write_text(json.dumps({"word2idx": {"<pad>": 0, "x": 5}}))
    with pytest.raises(VLToolsError, match="indices must be"):
        Vocabulary.from_scan_json(tmp_path / "v.json")
    with pytest.raises(VLToolsError, match="<start> at index 1"):
        Vocabulary(["<pad>", "x", "<start>", "<end>", "<unk>"])


def test_long_captions_are_cut_to_the_word_limit_with_one_counted_warning(monkeypatch):
    vocab = Vocabulary.build(["a b"], threshold=1)
    long = " ".join(["a"] * 5000)
    assert vocab.encode(long) == [1, *[4] * MAX_CAPTION_TOKENS, 2]
    assert vocab.encode("b a", max_tokens=1) == [1, 5, 2]
    monkeypatch.setenv(MAX_TOKENS_VARIABLE, "3")
    warnings = []
    monkeypatch.setattr(vltools_log, "warning", lambda message, *args: warnings.append(message % args))
    assert vocab.encode_all([long, "a b", long]) == [[1, 4, 4, 4, 2], [1, 4, 5, 2], [1, 4, 4, 4, 2]]
    assert warnings == [
        f"2 captions longer than 3 words were cut to 3 words (set {MAX_TOKENS_VARIABLE} to change the limit)"]
    monkeypatch.setenv(MAX_TOKENS_VARIABLE, "0")
    assert len(vocab.encode(long)) == 5002
    monkeypatch.setenv(MAX_TOKENS_VARIABLE, "many")
    with pytest.raises(VLToolsError, match="VLTOOLS_MAX_CAPTION_TOKENS='many'"):
        vocab.encode("a")


def test_encode_with_another_tokenizer_and_a_length_cut():
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "dogs", "run"])
    assert vocab.encode("Dog's run fast", tokenizer=str.split, max_tokens=2) == [1, 3, 5, 2]
    assert vocab.encode("dogs run", max_tokens=1) == [1, 4, 2]
