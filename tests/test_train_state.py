"""Resume checks, RNG states, deterministic mode and the JSON training log."""

from __future__ import annotations

import json

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.training.state import JsonLog, check_inputs, check_resumable, deterministic, rng_state, set_rng_state


def test_rng_state_round_trip_repeats_the_draws():
    state = rng_state(torch.device("cpu"))
    first = torch.rand(4)
    set_rng_state(state, torch.device("cpu"))
    assert torch.equal(torch.rand(4), first)


def test_resume_allows_schedule_changes_and_refuses_others(tmp_path):
    saved = {"train": {"epochs": 2, "lr": 0.1}}
    check_resumable(saved, {"train": {"epochs": 5, "lr": 0.1}}, tmp_path / "m.last.pt")
    with pytest.raises(VLToolsError, match=r"m.last.pt: was written with train.lr=0.1, now 0.2"):
        check_resumable(saved, {"train": {"epochs": 2, "lr": 0.2}}, tmp_path / "m.last.pt")


def test_resume_refuses_other_inputs_naming_the_first(tmp_path):
    check_inputs({"captions": "a"}, {"captions": "a", "extra": 1}, tmp_path / "m.last.pt")
    with pytest.raises(VLToolsError, match="input captions='a', now 'b'"):
        check_inputs({"captions": "a"}, {"captions": "b"}, tmp_path / "m.last.pt")


def test_deterministic_mode_is_restored_afterwards():
    before = torch.are_deterministic_algorithms_enabled()
    with deterministic(not before):
        assert torch.are_deterministic_algorithms_enabled() is (not before)
    assert torch.are_deterministic_algorithms_enabled() is before


def test_log_keeps_the_first_lines_on_resume_and_appends(tmp_path):
    path = tmp_path / "m.log.jsonl"
    log = JsonLog(path, keep=None, enabled=True)
    for step in range(3):
        log.write({"step": step})
    resumed = JsonLog(path, keep=2, enabled=True)
    resumed.write({"step": 9})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 9]
    assert resumed.lines == 3
    JsonLog(tmp_path / "other.jsonl", keep=None, enabled=False).write({"step": 0})
    assert not (tmp_path / "other.jsonl").exists()
