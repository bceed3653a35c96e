import json
from collections import Counter

import pytest

from vltools.errors import VLToolsError
from vltools.io.progress import log as vltools_log
from vltools.text.tokenize import tokenize
from vltools.text.vocab import MAX_CAPTION_TOKENS, MAX_TOKENS_VARIABLE, SPECIALS, Coverage, Vocabulary


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("A Dog's ball, red.") == ["a", "dog", "'s", "ball", ",", "red", "."]


def test_build_keeps_words_at_threshold_in_first_seen_order():
    vocab = Vocabulary.build(["b a", "a b", "a c", "b a"], threshold=3)
    assert vocab.words == ["<pad>", "<start>", "<end>", "<unk>", "b", "a"]
    assert vocab.encode("A b zebra") == [1, 5, 4, 3, 2]
    assert vocab.decode([1, 5, 4, 3, 2, 4]) == "a b <unk>"


def test_a_vocabulary_with_no_word_beyond_the_specials_is_refused_naming_the_setting():
    with pytest.raises(VLToolsError, match=r"^the vocabulary built from the training captions holds no word seen at "
                                           r"least 1000000 times \(the most frequent is seen 3 times\); lower "
                                           r"task.min_count$"):
        Vocabulary.build(["b a", "a b", "a c"], threshold=10**6, setting="task.min_count")
    with pytest.raises(VLToolsError, match="seen 0 times"):
        Vocabulary.build([], threshold=1)


# sixteen captions of real photos: the default threshold (4) keeps the function words and drops nearly every
# content word, which a caption of its own data mentions once or twice
PHOTO_CAPTIONS = [
    "A man riding a red bicycle down a city street.", "Two dogs playing with a ball in the grass.",
    "A plate of food with broccoli and rice on a table.", "A woman holding an umbrella in the rain.",
    "A red bus parked on the side of the road.", "A cat sleeping on top of a laptop keyboard.",
    "A group of people standing in a kitchen.", "An airplane flying over a snowy mountain.",
    "A boy throwing a frisbee in the park.", "A red fire hydrant on a sidewalk.",
    "A bowl of fruit on a wooden table.", "A train pulling into the station at night.",
    "Two zebras grazing in an open field.", "A man in a suit talking on a phone.",
    "A pizza with cheese and tomatoes on a plate.", "An elephant walking through the tall grass.",
]


def capture_log(monkeypatch) -> dict[str, list[str]]:
    """The info and warning lines the vltools logger writes, as texts."""
    lines = {"info": [], "warning": []}
    for level in lines:
        monkeypatch.setattr(vltools_log, level, lambda message, *args, level=level: lines[level].append(message % args))
    return lines


def test_building_on_little_data_logs_what_the_vocabulary_keeps_and_warns_naming_the_setting(monkeypatch):
    lines = capture_log(monkeypatch)
    vocab = Vocabulary.build(PHOTO_CAPTIONS, threshold=4, setting="task.vocab_threshold")
    assert vocab.words[4:] == ["a", ".", "in", "the", "of", "on", "an"]     # 70 of the 151 words (a x25, . x16)
    assert lines["info"] == ["vocabulary: 7 of the 78 distinct words of the training captions (those seen at least 4 "
                             "times, task.vocab_threshold), 46.4% of their 151 words"]
    assert lines["warning"] == ["the vocabulary keeps only 7 of the 78 distinct words of the training captions (those "
                                "seen at least 4 times), 46% of their words: the model will read the rest as <unk>; "
                                "lower task.vocab_threshold for data this small, e.g. --set task.vocab_threshold=1 "
                                "keeps 100%"]


def test_a_vocabulary_keeping_most_words_logs_its_size_without_a_warning(monkeypatch):
    lines = capture_log(monkeypatch)
    Vocabulary.build(["a red dog", "a red cat", "a dog", "a cat", "a red bird"], threshold=2, setting="task.min_count")
    assert lines["info"] == ["vocabulary: 4 of the 5 distinct words of the training captions (those seen at least 2 "
                             "times, task.min_count), 92.3% of their 13 words"]
    assert lines["warning"] == []


def test_the_warning_suggests_the_largest_threshold_keeping_nine_tenths(monkeypatch):
    lines = capture_log(monkeypatch)
    Vocabulary.build(["a b c"] * 3 + ["a b"] * 5 + ["a a d"], threshold=5)    # a x10, b x8, c x3, d x1
    assert lines["warning"] == ["the vocabulary keeps only 2 of the 4 distinct words of the training captions (those "
                                "seen at least 5 times), 82% of their words: the model will read the rest as <unk>; "
                                "lower task.vocab_threshold for data this small, e.g. --set task.vocab_threshold=3 "
                                "keeps 95%"]


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


def test_coverage_counts_the_encoded_words_outside_the_vocabulary():
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "a", "red", "dog"])
    coverage = Coverage()
    assert vocab.encode_all(["a red cat", "a rocket and a cat", "a red dog"], coverage=coverage) == \
        [[1, 4, 5, 3, 2], [1, 4, 3, 3, 4, 3, 2], [1, 4, 5, 6, 2]]
    assert coverage.words == 11 and dict(coverage.unknown) == {"cat": 2, "rocket": 1, "and": 1}
    assert coverage.share() == pytest.approx(4 / 11)
    vocab.encode("a cat", max_tokens=1, coverage=coverage)     # only the words kept count
    assert coverage.words == 12 and coverage.unknown["cat"] == 2
    assert Coverage().share() == 0.0
    assert vocab.encode_all(["a cat"]) == [[1, 4, 3, 2]]      # without a Coverage nothing is counted


@pytest.mark.parametrize("unknown, info, warning", [
    ({"cat": 1}, "5.0% (1 of 20)", None),
    ({"cat": 1, "rocket": 3, "moon": 2, "spaceship": 1}, "35.0% (7 of 20)",
     "35% of the caption words are outside the vocabulary of sgr.pt (e.g. 'rocket', 'moon', 'cat'): it reads each "
     "as <unk>, so its scores of these captions probably mean little; use a model whose vocabulary holds words like "
     "these (its training log says how much of its own captions it kept)"),
])
def test_coverage_report_is_one_info_line_and_a_warning_above_5_percent(monkeypatch, unknown, info, warning):
    lines = {"info": [], "warning": []}
    for level in lines:
        monkeypatch.setattr(vltools_log, level, lambda message, *args, level=level: lines[level].append(message % args))
    Coverage(20, Counter(unknown)).report("sgr.pt")
    assert lines["info"] == [f"caption words outside the vocabulary of sgr.pt: {info}"]
    assert lines["warning"] == ([warning] if warning else [])


def test_a_huge_caption_is_cut_before_it_is_tokenised():
    """A 20 MB caption was tokenised whole, which NLTK's sentence splitter ended in a regular-expression time-out."""
    vocab = Vocabulary.build(["a red cube"], threshold=1)
    huge = "a red cube. " * 2_000_000
    assert len(vocab.encode(huge)) == MAX_CAPTION_TOKENS + 2
    assert vocab.encode(huge, 4) == vocab.encode("a red cube. a", 4) == [1, 4, 5, 6, 3, 2]


def test_a_huge_training_caption_is_cut_before_it_is_counted():
    """Vocabulary.build tokenised a 20 MB training caption whole, as encode did before its cut."""
    huge = "a red cube. " * 2_000_000 + "zebra"
    vocab = Vocabulary.build([huge, "zebra"], threshold=1)
    assert vocab.words[len(SPECIALS):] == ["a", "red", "cube", ".", "zebra"]
