"""Semantic retrieval data: each image's texts grouped (order, splits, refusals), the tf-idf proxy built from them and
the text oracle's similarities, both against a direct computation on a hand corpus."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from vltools.data.semantic import build_fisher_proxy, build_proxy, image_texts, oracle_sims, same_words
from vltools.errors import VLToolsError
from vltools.synth.grammar import image_captions
from vltools.synth.scene import sample_scene
from vltools.text.fisher import FisherSettings
from vltools.text.word2vec import Word2VecSettings

# image -> (split, captions) of the hand corpus; "zebra" and "green" appear only outside train
CORPUS = {
    "a": ("train", ["a dog on grass", "Two dogs."]),
    "b": ("train", ["a cat", "the cat sleeping"]),
    "c": ("train", ["a tree and grass"]),
    "d": ("train", ["a dog and a cat"]),
    "e": ("test", ["dogs on grass"]),
    "f": ("test", ["a cat near a tree", "zebra"]),
    "g": ("test", ["a green dog"]),
    "h": ("val", ["cat"]),
}
# the Snowball stems of each image's words, by hand
STEMS = {
    "a": ["a", "dog", "on", "grass", "two", "dog"],
    "b": ["a", "cat", "the", "cat", "sleep"],
    "c": ["a", "tree", "and", "grass"],
    "d": ["a", "dog", "and", "a", "cat"],
    "e": ["dog", "on", "grass"],
    "f": ["a", "cat", "near", "a", "tree", "zebra"],
    "g": ["a", "green", "dog"],
    "h": ["cat"],
}
# the same as sets (the default: each image's words counted once, Gordo & Larlus's "single set of words")
SETS = {image: list(dict.fromkeys(stems)) for image, stems in STEMS.items()}
IDS = list(CORPUS)
SPLITS = [CORPUS[i][0] for i in IDS]
TEXTS = [CORPUS[i][1] for i in IDS]


def direct_tfidf(bags: dict[str, list[str]], train: list[str]) -> tuple[list[str], dict[str, float], np.ndarray]:
    """Vocabulary (sorted training terms), idf = ln(n_train / df) and the l2-normalised count x idf rows."""
    vocab = sorted({t for i in train for t in bags[i]})
    idf = {t: math.log(len(train) / sum(t in bags[i] for i in train)) for t in vocab}
    rows = []
    for image in bags:
        weights = np.array([bags[image].count(t) * idf[t] for t in vocab])
        norm = np.linalg.norm(weights)
        rows.append(weights / norm if norm > 0 else weights)
    return vocab, idf, np.array(rows)


def direct_neighbours(dense: np.ndarray, splits: list[str], k: int) -> tuple[list[list[int]], list[list[float]]]:
    """For each row the k rows of its split (itself excluded) by decreasing dot product, ties to the lower row;
    padded with -1 / NaN."""
    neighbours, sims = [], []
    for row, split in enumerate(splits):
        others = [o for o, s in enumerate(splits) if s == split and o != row]
        ranked = sorted(others, key=lambda o: (-round(float(dense[row] @ dense[o]), 6), o))[:k]
        neighbours.append(ranked + [-1] * (k - len(ranked)))
        sims.append([float(dense[row] @ dense[o]) for o in ranked] + [math.nan] * (k - len(ranked)))
    return neighbours, sims


# ---- image_texts ---------------------------------------------------------------------------------------------------

def records() -> list[dict]:
    return [{"image_id": "x", "caption": "one", "split": "train"}, {"image_id": "y", "caption": "two", "split": "val"},
            {"image_id": "x", "caption": "three", "split": "train"}, {"image_id": "z", "caption": "four",
                                                                      "split": "train"}]


def test_images_come_in_order_of_first_mention_with_their_texts_grouped():
    ids, splits, texts = image_texts(records(), "caps.jsonl")
    assert ids == ["x", "y", "z"]
    assert splits == ["train", "val", "train"]
    assert texts == [["one", "three"], ["two"], ["four"]]


def test_an_images_file_sets_the_order_splits_and_images_without_captions():
    images = [{"image_id": "z", "split": "train"}, {"image_id": "w", "split": "test"},
              {"image_id": "y", "split": "val"}, {"image_id": "x"}]
    ids, splits, texts = image_texts(records(), "caps.jsonl", images, "images.jsonl")
    assert ids == ["z", "w", "y", "x"]
    assert splits == ["train", "test", "val", "train"]      # x has no split in the images file: its captions'
    assert texts == [["four"], [], ["two"], ["one", "three"]]


def test_captions_of_images_absent_from_the_images_file_are_named():
    images = [{"image_id": "x", "split": "train"}]
    with pytest.raises(VLToolsError) as exc:
        image_texts(records(), "caps.jsonl", images, "images.jsonl")
    message = str(exc.value)
    assert message.startswith("caps.jsonl: 2 images named by captions are absent from images.jsonl: 'y', 'z'")
    assert "\n" not in message


def test_a_caption_split_other_than_the_images_file_s_is_refused_naming_the_record():
    images = [{"image_id": "x", "split": "train"}, {"image_id": "y", "split": "test"},
              {"image_id": "z", "split": "train"}]
    with pytest.raises(VLToolsError) as exc:
        image_texts(records(), "caps.jsonl", images, "images.jsonl")
    assert str(exc.value).startswith("caps.jsonl: record 2: image 'y' is in split 'val' here and in 'test' elsewhere")


def test_captions_of_one_image_in_two_splits_are_refused_naming_the_later_record():
    recs = records()
    recs[2] = {**recs[2], "split": "test"}
    with pytest.raises(VLToolsError) as exc:
        image_texts(recs, "caps.jsonl")
    assert str(exc.value).startswith("caps.jsonl: record 3: image 'x' is in split 'test' here and in 'train' "
                                     "elsewhere")


def test_images_without_any_split_are_refused_naming_them():
    recs = [{"image_id": "x", "caption": "one"}, {"image_id": "y", "caption": "two", "split": "train"},
            {"image_id": "q", "caption": "three"}]
    with pytest.raises(VLToolsError) as exc:
        image_texts(recs, "caps.jsonl")
    message = str(exc.value)
    assert message.startswith("caps.jsonl: 2 images have no split: 'x', 'q'") and "'split'" in message


def test_a_split_given_by_a_later_caption_counts():
    recs = [{"image_id": "x", "caption": "one"}, {"image_id": "x", "caption": "two", "split": "val"}]
    assert image_texts(recs, "caps.jsonl") == (["x"], ["val"], [["one", "two"]])


# ---- build_proxy ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("distinct", "bags"), [(True, SETS), (False, STEMS)], ids=["distinct", "occurrences"])
def test_proxy_of_the_hand_corpus_against_a_direct_computation(distinct, bags):
    proxy = build_proxy(IDS, SPLITS, TEXTS, "train", k=2, distinct=distinct)
    vocab, idf, dense = direct_tfidf(bags, ["a", "b", "c", "d"])
    assert vocab == ["a", "and", "cat", "dog", "grass", "on", "sleep", "the", "tree", "two"]
    assert proxy.ids == IDS and proxy.splits == SPLITS and proxy.vocab == vocab
    np.testing.assert_allclose(proxy.idf, [idf[t] for t in vocab], rtol=1e-12)
    np.testing.assert_allclose(proxy.idf[:4], [0.0, math.log(2), math.log(2), math.log(2)], rtol=1e-12)
    assert proxy.tfidf.shape == (8, 10)
    np.testing.assert_allclose(proxy.tfidf.toarray(), dense, atol=1e-7)
    # by hand: h = "cat" alone -> the unit vector of cat; e = dog, on, grass weighted ln2, ln4, ln2
    assert proxy.tfidf[7].toarray().ravel().tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    e = np.array([math.log(2), math.log(4), math.log(2)])
    np.testing.assert_allclose(proxy.tfidf[4].toarray().ravel()[[3, 5, 4]], e / np.linalg.norm(e), rtol=1e-6)
    neighbours, sims = direct_neighbours(dense, SPLITS, 2)
    assert proxy.neighbors.tolist() == neighbours
    np.testing.assert_allclose(proxy.neighbor_sims, sims, atol=1e-6)     # NaN where equal NaN
    assert proxy.neighbors[7].tolist() == [-1, -1]                       # h is alone in val
    for row, split in enumerate(SPLITS):                                 # neighbours never cross a split
        assert all(SPLITS[n] == split for n in proxy.neighbors[row] if n >= 0)


def test_a_split_smaller_than_k_plus_one_is_padded_and_warned(caplog):
    with caplog.at_level(logging.WARNING, logger="vltools"):
        proxy = build_proxy(IDS, SPLITS, TEXTS, "train", k=3)
    assert proxy.neighbors[4].tolist()[2] == -1 and np.isnan(proxy.neighbor_sims[4, 2])   # test has 3 images
    assert (proxy.neighbors[:4] >= 0).all()                                              # train has 4
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "split 'test' has 3 images" in warned and "split 'val' has 1 images" in warned
    assert "split 'train'" not in warned


def test_an_image_without_vocabulary_words_is_a_zero_row_and_warned(caplog):
    ids, splits = ["p", "q", "r"], ["train", "train", "test"]
    with caplog.at_level(logging.WARNING, logger="vltools"):
        proxy = build_proxy(ids, splits, [["dog"], ["cat"], ["a zebra"]], "train", k=1)
    assert proxy.tfidf[2].nnz == 0
    assert "'r'" in " ".join(r.getMessage() for r in caplog.records)


def test_unstemmed_texts_are_whole_terms():
    texts = [["traffic light", "car"], ["car", "cars"], ["traffic light"], ["cars", "traffic light"]]
    proxy = build_proxy(["p", "q", "r", "s"], ["train", "train", "train", "test"], texts, "train", k=1, stem=False)
    bags = {"p": ["traffic light", "car"], "q": ["car", "cars"], "r": ["traffic light"],
            "s": ["cars", "traffic light"]}
    vocab, idf, dense = direct_tfidf(bags, ["p", "q", "r"])
    assert proxy.vocab == vocab == ["car", "cars", "traffic light"]
    np.testing.assert_allclose(proxy.idf, [math.log(3 / 2), math.log(3), math.log(3 / 2)], rtol=1e-12)
    np.testing.assert_allclose(proxy.tfidf.toarray(), dense, atol=1e-7)


def test_the_vocabulary_and_idf_come_from_the_chosen_training_split():
    proxy = build_proxy(IDS, SPLITS, TEXTS, "test", k=1)
    vocab, idf, dense = direct_tfidf(SETS, ["e", "f", "g"])
    assert proxy.vocab == vocab and "zebra" in vocab and "sleep" not in vocab
    np.testing.assert_allclose(proxy.idf, [idf[t] for t in vocab], rtol=1e-12)
    np.testing.assert_allclose(proxy.tfidf.toarray(), dense, atol=1e-7)


def test_an_empty_training_split_is_refused_listing_the_splits():
    with pytest.raises(VLToolsError, match=r"no image is in the training split 'dev' \(splits: test, train, val\)"):
        build_proxy(IDS, SPLITS, TEXTS, "dev", k=1)


# ---- oracle_sims ---------------------------------------------------------------------------------------------------

def test_oracle_sims_are_tfidf_dot_products_of_the_first_queries_against_the_split():
    proxy = build_proxy(IDS, SPLITS, TEXTS, "train", k=2)
    _, _, dense = direct_tfidf(SETS, ["a", "b", "c", "d"])
    sims = oracle_sims(proxy, "test", queries=2)
    assert sims.image_ids == ["e", "f"] and sims.caption_ids == ["e", "f", "g"]
    assert sims.caption_image_ids is None
    assert sims.sims.dtype == np.float32 and sims.sims.shape == (2, 3)
    np.testing.assert_allclose(sims.sims, dense[[4, 5]] @ dense[[4, 5, 6]].T, atol=1e-6)
    np.testing.assert_allclose(np.diag(sims.sims[:, :2]), [1.0, 1.0], atol=1e-6)
    every = oracle_sims(proxy, "train")
    assert every.image_ids == every.caption_ids == ["a", "b", "c", "d"]
    np.testing.assert_allclose(every.sims, dense[:4] @ dense[:4].T, atol=1e-6)


def test_oracle_of_an_unknown_split_is_refused_listing_the_splits():
    proxy = build_proxy(IDS, SPLITS, TEXTS, "train", k=1)
    with pytest.raises(VLToolsError, match=r"no image in split 'dev' of the proxy \(splits: test, train, val\)"):
        oracle_sims(proxy, "dev")


# ---- build_fisher_proxy --------------------------------------------------------------------------------------------

def test_the_word2vec_proxy_keeps_each_image_s_neighbours_when_the_images_come_in_reverse_order():
    """The synthetic world's captions (5 per image, 150 training and 50 test images), the recipe's settings (300-d
    skip-gram, 16 components): each test image keeps at least 95% of its 32 nearest images (before issue 42, EM
    started from the words in order of first appearance and the vectors trained in file order: 69% at worst)."""
    rng = np.random.default_rng(0)
    ids = [f"im{i:03d}" for i in range(200)]
    splits = ["train" if i < 150 else "test" for i in range(200)]
    texts = [image_captions(rng, sample_scene(rng, 64), 5) for _ in ids]
    forward, _ = build_fisher_proxy(ids, splits, texts, "train", 32, FisherSettings(), Word2VecSettings())
    backward, _ = build_fisher_proxy(ids[::-1], splits[::-1], texts[::-1], "train", 32, FisherSettings(),
                                     Word2VecSettings())
    for row in range(150, 200):
        mine = {ids[n] for n in forward.neighbors[row]}
        reversed_row = 199 - row
        theirs = {backward.ids[n] for n in backward.neighbors[reversed_row]}
        assert len(mine) == 32 and len(mine & theirs) >= 0.95 * 32, ids[row]


def test_the_word2vec_proxy_takes_an_image_s_words_as_a_set_unless_told_to_count_them():
    ids, splits = ["p", "q", "r", "t"], ["train", "train", "test", "test"]
    texts = [["a red dog", "a blue cat"], ["a red cat", "the dog"], ["dog dog", "dog cat"], ["a cat dog"]]
    small = (FisherSettings(components=2), Word2VecSettings(dim=4, min_count=1, epochs=2))
    as_sets, _ = build_fisher_proxy(ids, splits, texts, "train", 1, *small)
    counted, _ = build_fisher_proxy(ids, splits, texts, "train", 1, *small, distinct=False)
    # r is the set {dog, cat}; t is {a, cat, dog}, so sets differ there; r's three dogs count once as a set
    r_alone, _ = build_fisher_proxy(ids, splits, [*texts[:2], ["cat dog"], texts[3]], "train", 1, *small)
    np.testing.assert_array_equal(as_sets.tfidf[2].toarray(), r_alone.tfidf[2].toarray())
    assert not np.allclose(counted.tfidf[2].toarray(), as_sets.tfidf[2].toarray())


def test_images_of_the_same_words_are_warned_about_as_sharing_their_fisher_vector(caplog):
    """Captions of 'a' and 'the' alone gave every such image the same Fisher vector, without a word."""
    ids, splits = ["p", "q", "r", "s", "t", "u"], ["train", "train", "train", "test", "test", "test"]
    texts = [["a red dog", "the blue cat"], ["a red cat", "the dog"], ["a blue dog"], ["the a"], ["a", "the"],
             ["a cat"]]
    small = (FisherSettings(components=2), Word2VecSettings(dim=4, min_count=1, epochs=2))
    with caplog.at_level(logging.WARNING, logger="vltools"):
        proxy, _ = build_fisher_proxy(ids, splits, texts, "train", 1, *small)
    np.testing.assert_array_equal(proxy.tfidf[3].toarray(), proxy.tfidf[4].toarray())
    assert proxy.tfidf[3].nnz > 0 and (proxy.tfidf[3] != proxy.tfidf[5]).nnz > 0
    warned = [r.getMessage() for r in caplog.records if "share their Fisher vector" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("2 images share their Fisher vector with another image")
    assert "(the largest group: 's', 't', with 'a', 'the')" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vltools"):
        build_fisher_proxy(ids, splits, [*texts[:4], ["a red the"], texts[5]], "train", 1, *small)
    assert not [r for r in caplog.records if "share their Fisher vector" in r.getMessage()]


def test_same_words_groups_rows_of_the_same_words_in_the_same_proportions():
    import scipy.sparse as sp

    counts = sp.csr_matrix(np.array([[1, 1, 0], [2, 2, 0], [1, 2, 0], [0, 0, 0], [0, 0, 0], [0, 2, 4], [0, 1, 2]]))
    assert same_words(counts) == [[0, 1], [5, 6]]
    assert same_words(sp.csr_matrix(np.eye(3))) == []


def test_images_of_the_same_stems_are_warned_about_as_sharing_their_tf_idf_vector(caplog):
    """The tf-idf proxy gave such images equal rows, tied as each other's neighbours, without the word2vec + FV
    proxy's warning."""
    ids, splits = ["p", "q", "r", "s", "t"], ["train", "train", "train", "test", "test"]
    texts = [["a red dog"], ["a blue cat"], ["the dog"], ["dogs"], ["dog", "dogs"]]
    with caplog.at_level(logging.WARNING, logger="vltools"):
        proxy = build_proxy(ids, splits, texts, "train", 1)
    np.testing.assert_array_equal(proxy.tfidf[3].toarray(), proxy.tfidf[4].toarray())
    warned = [r.getMessage() for r in caplog.records if "share their tf-idf vector" in r.getMessage()]
    assert warned == ["2 images share their tf-idf vector with another image, having the same vocabulary stems, and "
                      "tie as each other's neighbours (the largest group: 's', 't', with 'dog'); captions of a few "
                      "common words (such as 'a' and 'the' alone) give this"]


def test_only_too_few_words_is_blamed_on_min_count(monkeypatch):
    """Any ValueError of gensim's was told to lower --min-count."""
    import vltools.data.semantic as semantic

    ids, splits, texts = ["p", "q"], ["train", "test"], [["a dog"], ["a cat"]]
    small = (FisherSettings(components=1), Word2VecSettings(dim=4, min_count=5, epochs=1))
    with pytest.raises(VLToolsError, match="^word2vec: no word occurs 5 times .*; lower --min-count or give "):
        build_fisher_proxy(ids, splits, texts, "train", 1, *small)

    def refused(*args: object) -> None:
        raise ValueError("cannot sort vocabulary after model weights already initialized")

    monkeypatch.setattr(semantic, "train_word2vec", refused)
    with pytest.raises(VLToolsError, match=r"^word2vec: gensim refused to train \(cannot sort vocabulary after model "
                                            r"weights already initialized\); check --dim, --window and --epochs"):
        build_fisher_proxy(ids, splits, texts, "train", 1, *small)
