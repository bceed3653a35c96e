"""The local model store: names for checkpoints and ensembles, resolution of `--model` values, bad entries."""

from __future__ import annotations

import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.model_store import (
    ENV,
    OpenClipSpec,
    add_model,
    openclip_spec,
    read_index,
    remove_model,
    resolve_models,
    store_dir,
)


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
    with pytest.raises(VLToolsError, match=r"model=unknown: neither a checkpoint file nor a model .*\(registered: "
                                           r"x\); released models for model: .*`vltools models add"):
        resolve_models(["unknown"])
    with pytest.raises(VLToolsError, match="is a directory; give a checkpoint file or a model name"):
        resolve_models([str(store)])
    (store / "saf.pt").unlink()
    with pytest.raises(VLToolsError, match="saf.pt: checkpoint of the stored model 'x' is missing"):
        resolve_models(["x"])
    with pytest.raises(VLToolsError, match="nope: not in the model store"):
        remove_model("nope")
    (store / "store/models.json").write_text("[1, 2]")
    with pytest.raises(VLToolsError, match="models.json: the model store's index must be a JSON object"):
        read_index()


@pytest.mark.parametrize("index, problem", [
    ('{"x": {"members": [1, null]}}',
     "entry 'x': \"members\" must be a non-empty list of checkpoint paths, found [1, null]"),
    ('{"x": {"members": "a.pt"}}', "entry 'x': \"members\" must be a non-empty list"),
    ('{"x": {"members": []}}', "entry 'x': \"members\" must be a non-empty list"),
    ('{"x": ["a.pt"]}', "entry 'x' must be an object with \"members\""),
    ('{"x": {"members": ["a.pt"], "added": 5}}', "entry 'x': \"added\" must be a time string"),
    ('{"../x": {"members": ["a.pt"]}}', "has an entry with the invalid name '../x'"),
    ('{"x": ', "is not valid JSON (Expecting value at line 1 column 7)"),
    (b"\xff\xfe", "is not UTF-8 text"),
])
def test_an_index_of_wrong_types_is_one_line_naming_file_entry_and_repair(store, index, problem):
    """{"x": {"members": [1, null]}} once gave a TypeError traceback in `models list` and `match --model x`."""
    path = store / "store" / "models.json"
    path.parent.mkdir()
    path.write_bytes(index if isinstance(index, bytes) else index.encode())
    for call in (read_index, lambda: resolve_models(["x"]), lambda: add_model("y", [store / "sgr.pt"])):
        with pytest.raises(VLToolsError) as error:
            call()
        message = str(error.value)
        assert message.startswith(f"{path}: the model store's index ") and problem in message, message
        assert message.endswith("or delete " + str(path) + " and add the models again with `vltools models add`")


@pytest.mark.parametrize("option, name, command", [
    ("model", "sgraf", "bin/fetch_sgraf_models.sh --only f30k"),
    ("model", "sgr-f30k", "bin/fetch_sgraf_models.sh --only f30k"),
    ("model", "saf-coco", "bin/fetch_sgraf_models.sh --only coco"),
    ("model", "sgraf-coco", "bin/fetch_sgraf_models.sh --only coco"),
    ("detector_weights", "bottom-up-k36", "bin/fetch_bottom_up_weights.sh --fixed36"),
    ("detector_weights", "bottom-up", "bin/fetch_bottom_up_weights.sh"),
])
def test_a_released_name_not_in_the_store_says_the_exact_command_that_gets_it(store, option, name, command):
    """`--model sgr-coco` once said only that the released SGRAF models come from bin/fetch_sgraf_models.sh, which
    then fetched both datasets and failed for want of a vocabulary."""
    with pytest.raises(VLToolsError) as error:
        resolve_models([name], option)
    message = str(error.value)
    assert message.startswith(f"{option}={name}: neither a checkpoint file nor a model in the store ")
    assert f"run `{command}` in the vltools source tree" in message and "\n" not in message


@pytest.mark.parametrize("option, commands", [
    ("model", ["bin/fetch_sgraf_models.sh --only f30k", "bin/fetch_sgraf_models.sh --only coco"]),
    ("detector_weights", ["bin/fetch_bottom_up_weights.sh --fixed36", "bin/fetch_bottom_up_weights.sh`"]),
])
def test_an_unknown_name_lists_the_commands_of_the_released_models_of_its_option(store, option, commands):
    with pytest.raises(VLToolsError) as error:
        resolve_models(["sgraff"], option)
    message = str(error.value)
    assert all(f"`{command}" in message for command in commands), message
    assert "vltools models available" in message
    other = "fetch_bottom_up" if option == "model" else "fetch_sgraf"
    assert other not in message


def test_a_released_model_whose_checkpoint_went_missing_names_the_command_again(store):
    add_model("sgr-coco", [store / "sgr.pt"])
    (store / "sgr.pt").unlink()
    with pytest.raises(VLToolsError, match=r"checkpoint of the stored model 'sgr-coco' is missing; .*, or rerun "
                                           r"`bin/fetch_sgraf_models.sh --only coco`$"):
        resolve_models(["sgr-coco"])


def test_openclip_values_name_random_weights_files_tags_and_registered_files(store):
    assert resolve_models(["openclip:ViT-B-32:random", "openclip:ViT-B-32:none"]) == [
        OpenClipSpec("ViT-B-32", random=True, given="openclip:ViT-B-32:random"),
        OpenClipSpec("ViT-B-32", random=True, given="openclip:ViT-B-32:none")]
    assert openclip_spec("openclip:ViT-B-32") == OpenClipSpec("ViT-B-32", "laion2b_s34b_b79k",
                                                              given="openclip:ViT-B-32")
    assert openclip_spec("openclip:RN50").tag is None       # open_clip's first tag, when it loads
    assert openclip_spec(f"openclip:ViT-B-32:{store / 'sgr.pt'}").file == store / "sgr.pt"
    with pytest.raises(VLToolsError, match="no such weights file /nowhere/w.safetensors; give an existing"):
        openclip_spec("openclip:ViT-B-32:/nowhere/w.safetensors")
    with pytest.raises(VLToolsError, match="names no architecture"):
        openclip_spec("openclip:")
    add_model("openclip:ViT-B-32:openai", [store / "sgr.pt"])
    assert openclip_spec("openclip:ViT-B-32:openai") == OpenClipSpec("ViT-B-32", "openai", store / "sgr.pt",
                                                                     given="openclip:ViT-B-32:openai")
    assert openclip_spec("openclip:ViT-B-32").file is None    # its default tag is another one
    add_model("openclip:ViT-B-32", [store / "saf.pt"])
    assert openclip_spec("openclip:ViT-B-32") == OpenClipSpec("ViT-B-32", None, store / "saf.pt",
                                                              given="openclip:ViT-B-32")
    with pytest.raises(VLToolsError, match="not a valid OpenCLIP model name"):
        add_model("openclip:ViT-B-32:random", [store / "sgr.pt"])
    (store / "sgr.pt").unlink()
    with pytest.raises(VLToolsError, match="weights file of the stored model 'openclip:ViT-B-32:openai' is missing"):
        openclip_spec("openclip:ViT-B-32:openai")
