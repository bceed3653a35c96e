"""The local model store: names for checkpoints and ensembles, resolution of `--model` values, bad entries."""

from __future__ import annotations

import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.model_store import ENV, add_model, read_index, remove_model, resolve_models, store_dir


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    for name in ("sgr.pt", "saf.pt"):
        (tmp_path / name).write_bytes(b"weights of " + name.encode())
    return tmp_path


def test_store_folder_from_the_environment_or_the_default(store, monkeypatch):
    assert store_dir() == store / "store"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("HOME", str(store / "home"))
    assert store_dir() == store / "home/.local/share/vltools/models"


def test_add_list_resolve_remove(store):
    assert read_index() == {} and not (store / "store").exists()
    add_model("sgr-only", [store / "sgr.pt"])
    add_model("sgraf", [store / "sgr.pt", store / "saf.pt"])
    index = json.loads((store / "store/models.json").read_text())
    assert index["sgraf"]["members"] == [str(store / "sgr.pt"), str(store / "saf.pt")]
    # a name stands for all its members; paths pass through; order is kept
    assert resolve_models(["sgraf", str(store / "saf.pt"), "sgr-only"]) == \
        [store / "sgr.pt", store / "saf.pt", store / "saf.pt", store / "sgr.pt"]
    remove_model("sgr-only")
    assert sorted(read_index()) == ["sgraf"]
    assert (store / "sgr.pt").exists()   # the store never deletes files it did not copy


def test_copy_puts_the_files_in_the_store_and_remove_deletes_them(store):
    entry = add_model("m", [store / "sgr.pt"], copy=True)
    copied = store / "store/files/m/0-sgr.pt"
    assert entry["members"] == [str(copied)] and copied.read_bytes() == b"weights of sgr.pt"
    (store / "sgr.pt").unlink()
    assert resolve_models(["m"]) == [copied]
    remove_model("m")
    assert not copied.exists()


def test_bad_names_and_entries_are_one_line_errors(store):
    with pytest.raises(VLToolsError, match="not a valid model name"):
        add_model("my model.pt", [store / "sgr.pt"])
    with pytest.raises(VLToolsError, match="no such checkpoint"):
        add_model("x", [store / "missing.pt"])
    with pytest.raises(VLToolsError, match="is a directory"):
        add_model("x", [store])
    add_model("x", [store / "sgr.pt"])
    with pytest.raises(VLToolsError, match="already in the model store"):
        add_model("x", [store / "saf.pt"])
    add_model("x", [store / "saf.pt"], replace=True)
    assert resolve_models(["x"]) == [store / "saf.pt"]
    with pytest.raises(VLToolsError, match=r"unknown: neither a checkpoint file nor a model .*registered: x$"):
        resolve_models(["unknown"])
    with pytest.raises(VLToolsError, match="is a directory; give a checkpoint file or a model name"):
        resolve_models([str(store)])
    (store / "saf.pt").unlink()
    with pytest.raises(VLToolsError, match="saf.pt: checkpoint of the stored model 'x' is missing"):
        resolve_models(["x"])
    with pytest.raises(VLToolsError, match="nope: not in the model store"):
        remove_model("nope")
    (store / "store/models.json").write_text("[1, 2]")
    with pytest.raises(VLToolsError, match="not a model store index"):
        read_index()
