"""`vltools models` and `match --model NAME`: a stored ensemble matches exactly as its checkpoints given by path."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from matching_helpers import TINY, VOCAB, fails, make_world, save_tiny

from vltools.cli import cli
from vltools.io.checkpoints import save_checkpoint
from vltools.io.model_store import ENV
from vltools.io.sims import read_sims
from vltools.models import build_model


@pytest.fixture()
def world(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    features, captions = make_world(tmp_path, n_images=4, per_image=2)
    models = {name: save_tiny(tmp_path / f"{name}.pt", name, seed) for seed, name in enumerate(["sgr", "saf"])}
    return tmp_path, features, captions, models


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_add_list_match_by_name_remove(world):
    folder, features, captions, models = world
    run("models", "add", "sgraf", str(models["sgr"]), str(models["saf"]))
    run("models", "add", "sgr", str(models["sgr"]))
    assert run("models", "list").splitlines() == [f"sgr\t{models['sgr']}", f"sgraf\t{models['sgr']} + {models['saf']}"]
    run("match", "--model", "sgraf", str(features), str(captions), "--sims", str(folder / "named.h5"), "-o",
        str(folder / "named.jsonl"))
    run("match", "--model", str(models["sgr"]), "--model", str(models["saf"]), str(features), str(captions),
        "--sims", str(folder / "paths.h5"), "-o", str(folder / "paths.jsonl"))
    assert (read_sims(folder / "named.h5").sims == read_sims(folder / "paths.h5").sims).all()
    assert (folder / "named.jsonl").read_text() == (folder / "paths.jsonl").read_text()
    run("models", "remove", "sgr")
    assert run("models", "list").splitlines() == [f"sgraf\t{models['sgr']} + {models['saf']}"]


def test_bad_inputs_exit_1_with_one_line(world, capsys):
    folder, features, captions, models = world
    run("models", "add", "sgraf", str(models["sgr"]), str(models["saf"]))
    err = fails(capsys, "match", "--model", "sgraff", str(features), str(captions))
    assert "sgraff: neither a checkpoint file nor a model in the store" in err and "registered: sgraf" in err
    assert len(err.strip().splitlines()) == 1
    err = fails(capsys, "match", "--model", str(folder), str(features), str(captions))
    assert "is a directory; give --model a torch checkpoint file or a model name" in err
    # an ensemble whose members read other region features (here: 8 regions instead of 4)
    other = build_model("saf", {**TINY["saf"], "num_regions": 8}, len(VOCAB))
    save_checkpoint(folder / "saf8.pt", "saf", {**TINY["saf"], "num_regions": 8}, other.state_dict(), vocab=VOCAB,
                    schema=1)
    err = fails(capsys, "models", "add", "mixed", str(models["sgr"]), str(folder / "saf8.pt"))
    assert "num_regions=8 but" in err and "must read the same region features" in err
    # a store entry whose checkpoint was deleted
    models["saf"].unlink()
    err = fails(capsys, "match", "--model", "sgraf", str(features), str(captions))
    assert "checkpoint of the stored model 'sgraf' is missing" in err
    err = fails(capsys, "models", "remove", "nothing")
    assert "nothing: not in the model store" in err
    assert json.loads((folder / "store/models.json").read_text()).keys() == {"sgraf"}


def test_a_store_index_of_wrong_types_is_one_line_in_list_and_remove(tmp_path, monkeypatch, capsys):
    """{"x": {"members": [1, null]}} once gave a TypeError traceback in `models list`."""
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    index = tmp_path / "store" / "models.json"
    index.parent.mkdir()
    index.write_text('{"x": {"members": [1, null]}}', encoding="utf-8")
    for args in (["models", "list"], ["models", "remove", "x"]):    # match --model x: test_io_model_store
        err = fails(capsys, *args)
        assert err.strip().splitlines() == [
            f"vltools: error: {index}: the model store's index entry 'x': \"members\" must be a non-empty list of "
            f"checkpoint paths, found [1, null]; fix that entry, or delete {index} and add the models again with "
            "`vltools models add`"]


def test_available_lists_every_released_model_with_size_command_and_whether_the_store_holds_it(world):
    """A new user once learnt what a released model costs and needs only by running its script."""
    folder, _, _, models = world
    run("models", "add", "sgr-f30k", str(models["sgr"]))
    lines = run("models", "available").splitlines()
    rows = {line.split()[0]: line for line in lines[1:10]}
    assert lines[0].split()[:3] == ["NAME", "DOWNLOAD", "COMMAND"]
    assert sorted(rows) == sorted(["sgraf", "sgraf-f30k", "sgr-f30k", "saf-f30k", "sgraf-coco", "sgr-coco",
                                   "saf-coco", "bottom-up-k36", "bottom-up"])
    for name, command, size in [("sgr-f30k", "bin/fetch_sgraf_models.sh --only f30k", "about 140 MB"),
                                ("saf-coco", "bin/fetch_sgraf_models.sh --only coco", "about 150 MB"),
                                ("bottom-up-k36", "bin/fetch_bottom_up_weights.sh --fixed36", "about 260 MB"),
                                ("bottom-up", "bin/fetch_bottom_up_weights.sh ", "about 260 MB")]:
        assert f" {size}  {command}" in rows[name], rows[name]
    assert " yes " in rows["sgr-f30k"] and " no " in rows["saf-f30k"]
    text = "\n".join(lines)
    for source in ("https://drive.google.com/file/d/1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj/view",
                   "https://drive.google.com/file/d/1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag/view",
                   "vocab/f30k_precomp_vocab.json of https://github.com/Paranioar/SGRAF",
                   "bua-caffe-frcn-r101-k36.pth", "bua-caffe-frcn-r101-k10-100.pth"):
        assert source in text
    assert text.count("  needs:  ") == 4


def test_a_released_name_not_fetched_yet_says_its_command_in_match(world, capsys):
    folder, features, captions, models = world
    err = fails(capsys, "match", "--model", "sgraf-coco", str(features), str(captions))
    assert err.strip().splitlines() == [err.strip()]
    assert "--model sgraf-coco: neither a checkpoint file nor a model in the store" in err
    assert "run `bin/fetch_sgraf_models.sh --only coco` in the vltools source tree" in err


def test_available_lists_openclip_tags_and_add_registers_an_openclip_weights_file(world):
    pytest.importorskip("open_clip")
    import torch

    from vltools.infer.loader import load_model

    folder = world[0]
    text = run("models", "available")
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("openclip:")}
    assert sorted(rows) == ["openclip:ViT-B-16:laion2b_s34b_b88k", "openclip:ViT-B-32:laion2b_s34b_b79k",
                            "openclip:ViT-B-32:openai", "openclip:ViT-L-14:laion2b_s32b_b82k"]
    assert rows["openclip:ViT-B-32:laion2b_s34b_b79k"].split()[1:6] == [
        "about", "605", "MB", "laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "no"]
    assert "about 1710 MB" in rows["openclip:ViT-L-14:laion2b_s32b_b82k"]
    assert "vltools models add openclip:ARCH:TAG FILE" in text
    random = load_model("openclip:ViT-B-32:random", "encodable")
    torch.save(random.model.state_dict(), folder / "clip.pt")
    run("models", "add", "openclip:ViT-B-32:openai", str(folder / "clip.pt"))
    assert " yes " in run("models", "available").split("openclip:ViT-B-32:openai")[1].splitlines()[0]
    stored = load_model("openclip:ViT-B-32:openai", "encodable")
    assert stored.clip.weights == "clip.pt (openai)" and stored.clip.preprocess_cfg["interpolation"] == "bicubic"
    assert all(torch.equal(a, b) for a, b in zip(stored.model.state_dict().values(),
                                                  random.model.state_dict().values(), strict=True))
