"""The validators both interfaces share: each refuses a bad value in one line naming the argument as the caller
spells it (the Python name; the option while the command line runs)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vltools.errors import spelled
from vltools.infer import checks
from vltools.infer.checks import ArgumentError


@pytest.mark.parametrize(("value", "low", "high", "message"), [
    (-1, 1, None, "top_k must be a positive integer, not -1"),
    ("10", 1, None, "top_k must be a positive integer, not '10'"),
    (math.nan, 1, None, "top_k must be a positive integer, not nan"),
    (2.0, 1, None, "top_k must be a positive integer, not 2.0"),
    (True, 1, None, "top_k must be a positive integer, not True"),
    (10**9, 16, 4096, "top_k must be an integer from 16 to 4096, not 1000000000"),
    (-3, 0, None, "top_k must be a non-negative integer, not -3"),
])
def test_integer_refuses_other_types_and_values_out_of_range(value, low, high, message):
    with pytest.raises(ArgumentError) as info:
        checks.integer(value, "top_k", low, high)
    assert str(info.value) == message and info.value.name == "top_k"


def test_integer_and_number_accept_values_in_range():
    assert checks.integer(16, "image_size", 16, 4096) == 16 and checks.integer(4096, "image_size", 16, 4096) == 4096
    assert checks.number(1, "score_threshold", 0, 1) == 1.0
    assert checks.optional_integer(None, "num_regions", 1) is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 1.5, "0.2", None])
def test_number_refuses_non_finite_values_strings_and_values_out_of_range(value):
    with pytest.raises(ArgumentError, match=r"^score_threshold must be a finite number from 0 to 1, not "):
        checks.number(value, "score_threshold", 0, 1)
    with pytest.raises(ArgumentError, match=r"from 0 \(excluded\) to 1 \(excluded\)"):
        checks.number(0, "x", 0, 1, low_open=True, high_open=True)


def test_device_names_are_checked_without_torch():
    assert [checks.device(name, "device") for name in ("auto", "cpu", "cuda", "cuda:1", "mps")] == \
        ["auto", "cpu", "cuda", "cuda:1", "mps"]
    for value in ("gpu", "cuda0", "cuda:", "CPU", "cuda:-1", 0, None):
        with pytest.raises(ArgumentError, match=r"^device must be auto, cpu, cuda or cuda:K \(K: a GPU's index\), "
                                                rf"not {value!r}$"):
            checks.device(value, "device")


def test_paths_refuse_descriptors_none_and_dicts():
    assert checks.path(Path("a.h5"), "first") == Path("a.h5") and checks.path(None, "captions", True) is None
    for value in (123, None, "", {"a": 1}):
        with pytest.raises(ArgumentError, match=r"^first must be a file path \(str or pathlib.Path\), not "):
            checks.path(value, "first")
    assert checks.paths(("a", Path("b")), "scores") == ["a", Path("b")]
    for value in ("go\0od.tar", Path("go\0od.tar")):
        with pytest.raises(ArgumentError, match=r"^first must be a file path without a NUL character, not "):
            checks.path(value, "first")
    with pytest.raises(ArgumentError, match=r"^scores must be a file path or a non-empty list of paths, not \{"):
        checks.paths({"a": 1}, "scores")


def test_a_training_output_is_a_file_path_but_not_standard_output():
    assert checks.training_output(Path("m.pt"), "output") == Path("m.pt")
    for value in ("-", Path("-")):    # once the checkpoint on standard output, -.last.pt and -.log.jsonl as files
        with pytest.raises(ArgumentError, match=r"^output cannot be '-' \(standard output\): train writes a checkpoint "
                                                r"file with OUTPUT\.last\.pt and OUTPUT\.log\.jsonl beside it; "):
            checks.training_output(value, "output")
    with pytest.raises(ArgumentError, match=r"^output must be a file path \(str or pathlib.Path\), not None"):
        checks.training_output(None, "output")


def test_choice_flag_and_text():
    assert checks.choice("avg", "global_pool", ("avg", "rmac")) == "avg"
    with pytest.raises(ArgumentError, match="^global_pool must be one of avg, rmac, not 'bogus'$"):
        checks.choice("bogus", "global_pool", ("avg", "rmac"))
    with pytest.raises(ArgumentError, match="^strict must be True or False, not 'yes'$"):
        checks.flag("yes", "strict")
    with pytest.raises(ArgumentError, match="^split must be a non-empty string or None, not 3$"):
        checks.text(3, "split", optional=True)


def test_known_suggests_the_nearest_argument():
    checks.known(["top_k"], ["top_k", "split"], "match")
    with pytest.raises(ArgumentError, match=r"^topk is not an argument of vltools.match; did you mean top_k\?$"):
        checks.known(["topk"], ["top_k", "split"], "match")
    with pytest.raises(ArgumentError, match="colour is not an argument of vltools.match; it takes split, top_k"):
        checks.known(["colour"], ["top_k", "split"], "match")


def test_messages_spell_the_argument_as_the_interface_does():
    with spelled(lambda name, value=None: "--" + name.replace("_", "-")), \
            pytest.raises(ArgumentError, match="^--top-k must be a positive integer, not 0$") as info:
        checks.integer(0, "top_k", 1)
    assert info.value.problem == "must be a positive integer, not 0"


def test_lists_of_integers_and_of_words():
    assert checks.integers([1, 5, 10], "ks", 1) == (1, 5, 10)
    assert checks.integers((), "r_values", 1) == ()
    for value, message in (("1,5", "^ks must be a non-empty list of integers, not '1,5'$"),
                           ([], r"^ks must be a non-empty list of integers, not \[\]$"),
                           ([1, 0], "^ks must be a positive integer, not 0$"),
                           ([1, 2.5], "^ks must be a positive integer, not 2.5$"),
                           ({1: 2}, "^ks must be a non-empty list")):
        with pytest.raises(ArgumentError, match=message):
            checks.integers(value, "ks", 1, empty=False)
    assert checks.texts(["dog", "snow"], "add") == ("dog", "snow")
    with pytest.raises(ArgumentError, match="^add must be a list of words, not 'dog'$"):
        checks.texts("dog", "add")
    with pytest.raises(ArgumentError, match="^subtract must be a non-empty string"):
        checks.texts(["dog", ""], "subtract")


def test_split_names_are_non_empty_and_printable():
    """A split is written as given into records and file names: '' and one holding ESC or a newline were."""
    assert checks.split("test", "split") == "test" and checks.split(None, "split", optional=True) is None
    assert checks.splits(["train", "restval"], "only_splits") == ("train", "restval")
    # a split holding a path made convert to-precomp write {split}_ims.npy into another folder
    for value in ("", "\x1b[31mtest", "te\nst", "val\t", None, 3, "../test", "a/b", "a\\b", ".", ".."):
        with pytest.raises(ArgumentError, match=r"^split must be a split name \(a non-empty string of printable "
                                                r"characters, without a slash\), not "):
            checks.split(value, "split")
    with pytest.raises(ArgumentError, match="^only_splits must be a split name"):
        checks.splits(["train", ""], "only_splits")
