"""Word tokenisation as word_tokenize does it: the sentence split (punkt, or the offline rule) before Treebank."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from nltk.tokenize import NLTKWordTokenizer

from vltools.errors import VLToolsError
from vltools.text.tokenize import (
    PUNKT_NAME,
    RULE_NAME,
    _punkt,
    karpathy_tokenize,
    leading_words,
    tokenize,
    tokenizer_name,
)

# real captions with a period inside, already tokenised by the precomp release (periods split off)
LINES = (Path(__file__).parent / "data/tokenize/multi_sentence_caps.txt").read_text(encoding="utf-8").splitlines()


def raw(line: str) -> str:
    """The caption as typed: the period glued to the word before it ("mattress . The" -> "mattress. The")."""
    return re.sub(r"(\w) \.( |$)", r"\1.\2", line)


def test_the_file_holds_real_multi_sentence_captions():
    assert len(LINES) == 18
    assert raw(LINES[0]) == "A advertisement for a bed spread and mattress. The room looks very elegant."


@pytest.mark.parametrize("line", LINES)
def test_rule_splits_periods_off_like_the_released_tokenisation(line):
    expected = line.lower().split()          # the release's own tokens of this caption
    assert tokenize(raw(line), splitter="rule") == expected
    assert tokenize(line, splitter="rule") == expected


def test_without_the_sentence_split_the_period_stays_glued():
    # the case the sentence split exists for: a plain Treebank pass keeps "mattress." as one token
    line = raw(LINES[0]).lower()
    assert "mattress." in NLTKWordTokenizer().tokenize(line)
    assert tokenize(line, splitter="rule")[7:10] == ["mattress", ".", "the"]
    glued = sum(NLTKWordTokenizer().tokenize(raw(x).lower()) != x.lower().split() for x in LINES)
    assert glued >= 12   # most of the file needs the split


def test_hand_examples():
    assert tokenize("A dog runs. It is wet.", splitter="rule") == ["a", "dog", "runs", ".", "it", "is", "wet", "."]
    assert tokenize("Wow! a dog? yes.", splitter="rule") == ["wow", "!", "a", "dog", "?", "yes", "."]
    # abbreviations, initials and numbers keep their period (punkt on lower-case text does the same)
    assert tokenize("The corner of Howe St. and Broadway", splitter="rule")[4] == "st."
    assert tokenize("the letter A. on a sign", splitter="rule")[2] == "a."
    assert tokenize("A sign for U.S. route 1.", splitter="rule") == ["a", "sign", "for", "u.s.", "route", "1", "."]


def test_auto_picks_punkt_only_when_installed():
    assert tokenizer_name() == (PUNKT_NAME if _punkt() is not None else RULE_NAME)
    assert tokenizer_name("rule") == RULE_NAME
    if _punkt() is None:
        with pytest.raises(VLToolsError, match="punkt sentence model is not installed"):
            tokenize("a dog.", splitter="punkt")


@pytest.mark.skipif(_punkt() is None, reason="needs NLTK's punkt_tab data (offline here)")
def test_rule_agrees_with_word_tokenize_on_the_real_captions():
    from nltk.tokenize import word_tokenize

    for line in LINES:
        assert tokenize(raw(line), splitter="rule") == word_tokenize(raw(line).lower())


@pytest.mark.parametrize("tokens", [1, 3, 6, 12])
def test_the_leading_words_of_a_caption_give_its_first_tokens(tokens):
    for line in LINES:
        for text in (raw(line), line):
            for tokenizer in (tokenize, karpathy_tokenize):
                assert tokenizer(leading_words(text, tokens))[:tokens] == tokenizer(text)[:tokens]
    assert leading_words("a  b\nc", 1) == "a  b\nc" and leading_words("a b c d e", 1) == "a b c"


def test_tokenising_imports_nltk_without_scipy_stats_which_still_imports_afterwards():
    code = ("import sys; from vltools.text.tokenize import tokenize; assert tokenize('a dog. a cat') == "
            "['a', 'dog', '.', 'a', 'cat']; assert 'scipy.stats' not in sys.modules; import scipy.stats; "
            "assert scipy.stats.fisher_exact")
    subprocess.run([sys.executable, "-c", code], check=True)
