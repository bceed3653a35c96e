"""The concept vocabulary on a hand-written caption set (offline stop-word filter; NLTK's tagger when installed)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.text.concepts import (
    FALLBACK_TAGGER,
    NLTK_TAGGER,
    ConceptVocabulary,
    concept_words,
    nltk_tagger_available,
    normalize,
)

CAPTIONS = [
    "Two giraffes are eating from a basket",       # two giraff eat basket
    "A giraffe eats leaves near the basket",        # giraff eat leav basket
    "Three young cheetahs chasing a gazelle",       # three young cheetah chase gazell
    "a cheetah is chasing the gazelles on green grass",  # cheetah chase gazell green grass
    "it is there",                                  # nothing
]


def test_normalize_unifies_tenses_and_plurals():
    assert normalize("giraffes") == normalize("giraffe")
    assert normalize("eating") == normalize("eats") == normalize("eat")
    assert normalize("chasing") == normalize("chased")
    assert normalize("two") == "two" and normalize("12") == "12"


def test_fallback_keeps_content_words_and_numbers():
    words = concept_words("two giraffes are eating from a basket".split(), FALLBACK_TAGGER)
    assert words == ["two", "giraffes", "eating", "basket"]
    assert concept_words("it is there".split(), FALLBACK_TAGGER) == []


def test_vocabulary_counts_and_order():
    vocab = ConceptVocabulary.build(CAPTIONS, k=4, tagger=FALLBACK_TAGGER)
    # counts by hand: basket 2, giraff 2, eat 2, cheetah 2, chase 2, gazell 2, then one each; ties by stem
    assert vocab.concepts == ["basket", "chase", "cheetah", "eat"]
    assert vocab.counts == [2, 2, 2, 2]
    assert vocab.words == ["basket", "chasing", "cheetah", "eating"]   # most frequent surface form, ties by word
    full = ConceptVocabulary.build(CAPTIONS, k=256, tagger=FALLBACK_TAGGER)
    assert len(full) == 12      # fewer distinct concepts than K: all of them
    assert set(full.concepts) >= {"two", "three", "young", "green", "grass", "leav"}


def test_targets_are_multi_hot_per_image_and_empty_captions_kept():
    vocab = ConceptVocabulary.build(CAPTIONS, k=4, tagger=FALLBACK_TAGGER)
    targets = vocab.targets(["a", "b", "c"], CAPTIONS, ["a", "a", "b", "b", "c"])
    expected = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=np.float32)   # basket chase cheetah eat
    np.testing.assert_array_equal(targets, expected)


def test_round_trip_and_bad_files(tmp_path):
    vocab = ConceptVocabulary.build(CAPTIONS, k=5, tagger=FALLBACK_TAGGER, info={"split": "train"})
    stream = io.StringIO()
    vocab.save(stream)
    path = tmp_path / "concepts.json"
    path.write_text(stream.getvalue())
    again = ConceptVocabulary.load(path)
    assert (again.concepts, again.words, again.counts, again.tagger) == \
        (vocab.concepts, vocab.words, vocab.counts, FALLBACK_TAGGER)
    assert again.info["split"] == "train"
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(VLToolsError, match="not a vltools.concepts file"):
        ConceptVocabulary.load(tmp_path / "bad.json")


@pytest.mark.skipif(not nltk_tagger_available(), reason="NLTK tagger data not installed (bin/fetch_nltk_data.sh)")
def test_nltk_tagger_keeps_nouns_verbs_adjectives_numbers():
    words = concept_words("two young giraffes are eating from a basket".split(), NLTK_TAGGER)
    assert words == ["two", "young", "giraffes", "eating", "basket"]


def test_stage_writes_file_and_warns_once_offline(tmp_path, vltools_cmd):
    captions = tmp_path / "caps.jsonl"
    captions.write_text("".join(f'{{"image_id": "i{n // 2}", "caption": "{c}", "split": "train"}}\n'
                                for n, c in enumerate(CAPTIONS)))
    out = tmp_path / "concepts.json"
    result = vltools_cmd("concepts", captions, "-k", "3", "--tagger", "stopwords", "-o", out)
    assert result.returncode == 0, result.stderr
    loaded = ConceptVocabulary.load(out)
    assert loaded.concepts == ["basket", "chase", "cheetah"] and loaded.tagger == FALLBACK_TAGGER
    if not nltk_tagger_available():
        result = vltools_cmd("concepts", captions, "--tagger", "nltk", "-o", out)
        assert result.returncode == 1 and "bin/fetch_nltk_data.sh" in result.stderr.decode()
        assert len(result.stderr.decode().strip().splitlines()) == 1
        auto = vltools_cmd("concepts", captions, "-o", out)
        assert auto.returncode == 0 and auto.stderr.decode().count("stop-word filter") == 1


def test_captions_without_a_concept_word_are_refused_and_write_nothing(tmp_path, vltools_cmd):
    """Captions of function words alone gave an empty vocabulary and exit status 0."""
    captions = tmp_path / "caps.jsonl"
    captions.write_text('{"image_id": "i0", "caption": "a the of", "split": "train"}\n'
                        '{"image_id": "i1", "caption": "and the", "split": "train"}\n')
    out = tmp_path / "concepts.json"
    result = vltools_cmd("concepts", captions, "--tagger", "stopwords", "-o", out)
    assert result.returncode == 1 and not out.exists()
    assert result.stderr.decode().splitlines() == [
        f"vltools: error: {captions}: no concept word (noun, verb, adjective or number) in the 2 train captions "
        f"(tagger {FALLBACK_TAGGER}); give the captions of another --split"]
