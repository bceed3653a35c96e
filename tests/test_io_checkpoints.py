import argparse
import hashlib
import os
import pickle

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.io.checkpoints import (
    DIGEST_KEYS,
    NeedsPickle,
    content_digest,
    file_digest,
    load_checkpoint,
    save_checkpoint,
    save_state_dict,
)


def test_round_trip_with_weights_only(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "m.pt", "toy", {"dim": 3}, model.state_dict(), vocab=["<pad>"],
                    train_state={"epoch": 2}, schema=1)
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
    with pytest.raises(VLToolsError, match="broken.pt: not a vltools checkpoint: it is neither a torch zip archive "
                                           "nor a pickle"):
        load_checkpoint(tmp_path / "broken.pt")


@pytest.mark.parametrize("content", [bytes(range(256)) * 12, b"hello world\n", b"junk"])
def test_a_garbage_file_is_one_complete_line_without_torchs_advice(tmp_path, content):
    (tmp_path / "garbage.pt").write_bytes(content)
    with pytest.raises(VLToolsError) as caught:
        load_checkpoint(tmp_path / "garbage.pt")
    message = str(caught.value)
    assert message == (f"{tmp_path / 'garbage.pt'}: not a vltools checkpoint: it is neither a torch zip archive nor "
                       "a pickle (another kind of file, or corrupt); give a vltools checkpoint")


def test_a_full_pickle_names_the_trusted_import(tmp_path):
    with open(tmp_path / "full.pkl", "wb") as stream:
        pickle.dump({"opt": argparse.Namespace(a=1)}, stream)
    with pytest.raises(VLToolsError) as caught:
        load_checkpoint(tmp_path / "full.pkl")
    message = str(caught.value)
    assert "\n" not in message and "weights_only" not in message
    assert message.startswith(f"{tmp_path / 'full.pkl'}: needs pickle to load")
    assert message.endswith("--trust -o CKPT.pt`")


def test_empty_and_corrupted_checkpoints_are_refused_in_one_line(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(VLToolsError, match="empty.pt: empty file"):
        load_checkpoint(tmp_path / "empty.pt")
    weight = torch.arange(1000, dtype=torch.float32).reshape(100, 10) + 0.5
    save_checkpoint(tmp_path / "m.pt", "toy", {}, {"weight": weight}, train_state={"optimizer": {"lr": 0.1}}, schema=1)
    data = bytearray((tmp_path / "m.pt").read_bytes())
    start = bytes(data).index(weight.numpy().tobytes()[:64])
    for offset in range(start + 100, start + 600):  # 500 flipped bytes inside the tensor's storage
        data[offset] ^= 0x5A
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    with pytest.raises(VLToolsError, match="flipped.pt: the checkpoint's content does not match its digest"):
        load_checkpoint(tmp_path / "flipped.pt")
    (tmp_path / "cut.pt").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(VLToolsError, match="cut.pt: not a readable vltools checkpoint, it is truncated or corrupt; "
                                           "copy or write it again$"):
        load_checkpoint(tmp_path / "cut.pt")


def test_content_digest_sees_every_tensor_byte_and_value():
    state = {"a": torch.zeros(3), "b": {"step": 1, "m": [torch.ones(2, dtype=torch.bfloat16)]}}
    other = {"a": torch.zeros(3), "b": {"step": 1, "m": [torch.ones(2, dtype=torch.bfloat16)]}}
    assert content_digest(state) == content_digest(other)
    other["b"]["m"][0][1] = 2
    assert content_digest(state) != content_digest(other)
    assert content_digest({"a": torch.zeros(3)}) != content_digest({"a": torch.zeros(3, dtype=torch.float64)})
    assert content_digest({"step": 1}) != content_digest({"step": 2})


def test_the_schema_version_is_recorded_and_digested_and_older_files_still_verify(tmp_path):
    save_checkpoint(tmp_path / "m.pt", "toy", {}, {"weight": torch.zeros(2)}, schema=3)
    payload = load_checkpoint(tmp_path / "m.pt")
    assert payload["schema"] == 3
    payload["schema"] = 4
    torch.save(payload, tmp_path / "edited.pt")
    with pytest.raises(VLToolsError, match="does not match its digest"):
        load_checkpoint(tmp_path / "edited.pt")
    del payload["schema"]  # a checkpoint from before schemas: its digest covered the content keys only
    payload["digest"] = content_digest({key: payload[key] for key in DIGEST_KEYS})
    torch.save(payload, tmp_path / "old.pt")
    assert "schema" not in load_checkpoint(tmp_path / "old.pt")


def test_a_plain_state_dict_loads_with_weights_only_and_the_same_tensors_give_the_same_bytes(tmp_path):
    state = {"conv.weight": torch.arange(6.0).view(2, 3), "bn.num_batches_tracked": torch.tensor(3)}
    save_state_dict(tmp_path / "a.pt", state)
    save_state_dict(tmp_path / "b.pt", {key: value.clone() for key, value in state.items()})
    loaded = torch.load(tmp_path / "a.pt", map_location="cpu", weights_only=True)
    assert list(loaded) == list(state) and all(torch.equal(loaded[k], state[k]) for k in state)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_pickle_inside_a_torch_zip_calling_a_blocked_module_needs_pickle_not_corrupt(tmp_path):
    torch.save({"call": os.getcwd}, tmp_path / "calls.pt")     # a torch zip archive whose pickle names posix.getcwd
    with pytest.raises(NeedsPickle) as caught:
        load_checkpoint(tmp_path / "calls.pt")
    assert str(caught.value).startswith(f"{tmp_path / 'calls.pt'}: needs pickle to load, which can run arbitrary code")


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("config", None, "None, not a mapping"), ("vocab", 5, "5 (int), not a list of strings or None"),
    ("state_dict", [1, 2], "[1, 2] (list), not a mapping of names to tensors"), ("model", 3, "3 (int), not a string"),
    ("train_state", "x", "'x' (str), not a mapping"), ("schema", "1", "'1' (str), not an integer")])
def test_a_field_of_another_type_whose_digest_matches_is_one_line_naming_it(tmp_path, name, value, shown):
    """A checkpoint edited and digested again (the digest proves integrity, not origin) is still refused where a
    field has another type than every reader relies on, before any reader sees it."""
    save_checkpoint(tmp_path / "m.pt", "vse", {"embed_size": 8}, {"w": torch.zeros(2)}, vocab=["a"], schema=1)
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    payload[name] = value
    payload["digest"] = content_digest({**{key: payload[key] for key in DIGEST_KEYS}, "schema": payload["schema"]})
    torch.save(payload, tmp_path / "edited.pt")
    with pytest.raises(VLToolsError) as caught:
        load_checkpoint(tmp_path / "edited.pt")
    assert str(caught.value) == f"{tmp_path / 'edited.pt'}: field '{name}' is {shown}; copy or train it again"


def test_a_loaded_checkpoints_digest_comes_from_the_same_read_until_the_file_changes(tmp_path, monkeypatch):
    """`match` read its checkpoint three times before scoring a pair: the kind, the weights, the digest."""
    path = tmp_path / "m.pt"
    save_checkpoint(path, "vse", {}, {"w": torch.ones(3)}, schema=1)
    load_checkpoint(path)
    monkeypatch.setattr("builtins.open", lambda *args, **kwargs: pytest.fail("read again"))
    digest = file_digest(path)
    monkeypatch.undo()
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    save_checkpoint(path, "vse", {}, {"w": torch.zeros(3)}, schema=1)  # written again: another file, another digest
    assert file_digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()[:16] != digest
