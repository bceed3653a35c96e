"""A process's place in a torchrun job read from its environment, the blocks each process takes, and the
exchanges of a job of one (the torchrun jobs of the stages' tests exchange for real)."""

from __future__ import annotations

import numpy as np
import pytest

from vltools import distributed
from vltools.distributed import Place, gather, gather_rows, place, share


def in_job(monkeypatch, rank: int, world_size: int, local_rank: int | None = None) -> None:
    """The environment torchrun gives process `rank` of `world_size`."""
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(rank if local_rank is None else local_rank))


def test_without_torchrun_a_process_is_the_whole_job(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert place() == Place(1, 0, 0) and place().main and not place().active


def test_torchrun_environment(monkeypatch):
    in_job(monkeypatch, 5, 8, local_rank=1)
    assert place() == Place(8, 5, 1) and place().active and not place().main


@pytest.mark.parametrize("count, block", [(7, 2), (10, 3), (1, 4), (0, 2)])
def test_each_process_takes_whole_blocks_in_turn_and_together_all(monkeypatch, count, block):
    taken = []
    for rank in range(3):
        in_job(monkeypatch, rank, 3)
        mine = share(count, block)
        assert all((k // block) % 3 == rank for k in mine) and mine == sorted(mine)
        taken += mine
    assert sorted(taken) == list(range(count))


def test_blocks_of_two_among_two_processes(monkeypatch):
    in_job(monkeypatch, 1, 2)
    assert share(7, 2) == [2, 3, 6]
    in_job(monkeypatch, 0, 2)
    assert share(7, 2) == [0, 1, 4, 5]


def test_a_job_of_one_exchanges_with_itself(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert share(3) == [0, 1, 2]
    assert gather("x") == ["x"]


def test_rows_go_back_to_their_places_on_the_first_process(monkeypatch):
    """Blocks of 2 of 5 items among 3 processes: 0 takes items 0, 1; 1 takes 2, 3; 2 takes 4; a fourth process
    without items sends an empty array of another shape (an embedder that saw no image)."""
    rows = np.arange(10, dtype=np.float32).reshape(5, 2)
    sent = [([0, 1], rows[:2]), ([2, 3], rows[2:4]), ([4], rows[4:]), ([], np.zeros((0, 0), np.float32))]
    monkeypatch.setattr(distributed, "gather", lambda value: sent)
    assert np.array_equal(gather_rows(rows[:2], [0, 1]), rows)
    monkeypatch.setattr(distributed, "gather", lambda value: None)
    assert gather_rows(rows[2:4], [2, 3]) is None


def test_rows_of_a_job_of_one_are_its_own(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rows = np.ones((3, 2), dtype=np.float32)
    assert gather_rows(rows, [0, 1, 2]) is rows
