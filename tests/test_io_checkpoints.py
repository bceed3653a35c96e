import argparse

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint, save_checkpoint


def test_round_trip_with_weights_only(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "m.pt", "toy", {"dim": 3}, model.state_dict(), vocab=["<pad>"],
                    train_state={"epoch": 2})
    payload = load_checkpoint(tmp_path / "m.pt")
    assert payload["model"] == "toy" and payload["config"] == {"dim": 3} and payload["train_state"]["epoch"] == 2
    torch.testing.assert_close(payload["state_dict"]["weight"], model.weight.detach())


def test_pickled_objects_are_refused_with_the_opt_in_named(tmp_path):
    torch.save({"model": [{}], "opt": argparse.Namespace(a=1)}, tmp_path / "official.pth.tar")
    with pytest.raises(VLToolsError, match="--trust"):
        load_checkpoint(tmp_path / "official.pth.tar")


def test_foreign_and_broken_files(tmp_path):
    torch.save({"weight": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(VLToolsError, match="not a vltools checkpoint"):
        load_checkpoint(tmp_path / "plain.pt")
    (tmp_path / "broken.pt").write_bytes(b"garbage")
    with pytest.raises(VLToolsError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "broken.pt")
