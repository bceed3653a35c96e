"""Difference descriptions by a tiny random L2C model: batches of 1 equal batches of 3 (the model is put in eval mode,
so BatchNorm uses its running statistics), descriptions come in the order of the pairs, beam 1 is greedy."""

from __future__ import annotations

import pytest
import torch
from l2c_helpers import IMAGE_A, IMAGE_B, random_l2c
from l2c_helpers import PAIR_VOCAB as VOCAB

from vltools.data.l2c import FeatureMaps, PairSplit
from vltools.decoding.search import greedy
from vltools.infer.pairs import describe_batches, describe_pairs
from vltools.text.captions import decode


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return random_l2c(tmp_path_factory.mktemp("pairs"))


def describe(model, maps, batch_size: int, beam_size: int = 3, max_len: int = 6, a=IMAGE_A, b=IMAGE_B):
    return [texts for texts, _ in describe_batches(model, FeatureMaps(maps), a, b, VOCAB, beam_size=beam_size,
                                                   max_len=max_len, batch_size=batch_size)]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batches_of_one_equal_batches_of_three(world, beam_size):
    maps, model = world
    model.train()                                # describe_batches must switch to eval mode itself
    threes = describe(model, maps, 3, beam_size)
    assert not model.training
    assert [len(batch) for batch in threes] == [3, 3, 1]
    ones = describe(model, maps, 1, beam_size)
    assert [len(batch) for batch in ones] == [1] * 7
    flat = [text for batch in threes for text in batch]
    assert flat == [batch[0] for batch in ones]
    assert len(set(flat)) > 1 and all(len(text.split()) <= 6 for text in flat)


def test_each_description_belongs_to_its_pair_in_order(world):
    maps, model = world
    every = [text for batch in describe(model, maps, 3) for text in batch]
    reversed_pairs = [text for batch in describe(model, maps, 2, a=IMAGE_A[::-1], b=IMAGE_B[::-1]) for text in batch]
    assert reversed_pairs == every[::-1]
    split = PairSplit("test", [f"p{n}" for n in range(7)], IMAGE_A, IMAGE_B, [[] for _ in range(7)])
    assert describe_pairs(model, FeatureMaps(maps), split, VOCAB, beam_size=3, max_len=6, batch_size=4) == every


def test_beam_one_is_greedy_decoding_of_the_encoded_pairs(world):
    maps, model = world
    beam_one = [text for batch in describe(model, maps, 7, beam_size=1) for text in batch]
    model.eval()
    reader = FeatureMaps(maps)
    featmap_a, mask_a = reader.read(IMAGE_A)
    featmap_b, mask_b = reader.read(IMAGE_B)
    with torch.no_grad():
        cond, _ = model.encode(*(torch.from_numpy(x) for x in (featmap_a, mask_a, featmap_b, mask_b)))
        state, static = model.decoder.init_state(cond)
        direct = decode(VOCAB, greedy(model.decoder.step, state, static, max_len=6).tokens)
    assert beam_one == direct


def test_no_pairs_give_no_batches(world):
    maps, model = world
    assert describe(model, maps, 3, a=[], b=[]) == []
