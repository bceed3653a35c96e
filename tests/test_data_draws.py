"""vltools.data.draws: generators keyed by (seed, stream, position), the same in any process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

from vltools.data.draws import FLIPS, NEGATIVES, SAMPLES, EpochDraws, id_key, keyed_rng, keyed_seed


def test_a_key_gives_the_same_numbers_and_any_other_key_others():
    draws = {key: keyed_rng(*key).random(4).tolist() for key in
             [(0, NEGATIVES, 1, 2), (0, NEGATIVES, 1, 3), (0, NEGATIVES, 2, 2), (0, FLIPS, 1, 2), (1, NEGATIVES, 1, 2)]}
    assert len({tuple(values) for values in draws.values()}) == len(draws)
    assert keyed_rng(0, NEGATIVES, 1, 2).random(4).tolist() == draws[(0, NEGATIVES, 1, 2)]


def test_keyed_seeds_seed_torch_and_ignore_the_global_generator():
    seed = keyed_seed(7, FLIPS, 3, 5)
    assert 0 <= seed < 2 ** 64 and seed != keyed_seed(7, FLIPS, 3, 6)
    torch.manual_seed(123)
    first = torch.rand(3, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(456)
    assert torch.equal(torch.rand(3, generator=torch.Generator().manual_seed(keyed_seed(7, FLIPS, 3, 5))), first)


def test_an_id_keys_draws_by_its_bytes():
    """The first 8 bytes of SHA-256("img1"), little-endian (not Python's hash, which differs per process)."""
    assert id_key("img1") == int.from_bytes(bytes.fromhex("d7bdd545f09d8a73"), "little")
    assert id_key("img1") != id_key("img2") and 0 <= id_key("") < 2 ** 64
    assert keyed_seed(0, SAMPLES, id_key("img1")) != keyed_seed(0, NEGATIVES, id_key("img1"))


def test_another_process_draws_the_same():
    code = "from vltools.data.draws import keyed_seed; print(keyed_seed(7, 2, 3, 5))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(result.stdout) == keyed_seed(7, FLIPS, 3, 5)


def test_epoch_draws_follow_the_epoch_the_trainer_sets():
    data = EpochDraws()
    data.seed = 11
    first = data.rng(NEGATIVES, 4).integers(1000, size=5)
    data.set_epoch(1)
    second = data.rng(NEGATIVES, 4).integers(1000, size=5)
    assert not np.array_equal(first, second)
    data.set_epoch(0)
    assert np.array_equal(data.rng(NEGATIVES, 4).integers(1000, size=5), first)
