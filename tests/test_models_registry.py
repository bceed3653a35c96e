"""The model registry's checkpoint reading: a checkpoint's config is read with the meaning it was saved with, never
silently with a default that changed meaning since."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from vltools import models
from vltools.errors import VLToolsError
from vltools.io.checkpoints import CHECKPOINT_FORMAT, DIGEST_KEYS, content_digest, load_checkpoint, save_checkpoint
from vltools.models import build_model, checkpoint_config, default_config, model_from_checkpoint, schema_version

TINY_L2C = {"feature_dim": 4, "num_nodes": 3, "pool_hidden": 4, "graph_dim": 6, "embed_size": 4, "hidden_size": 6,
            "attention_size": 4}
WORDS = ["<pad>", "<start>", "<end>", "<unk>", "bird"]


def _save_previous_format(path, model: str, config: dict, state_dict: dict) -> None:
    """A checkpoint as vltools wrote it before config schemas: today's payload minus the schema key, its digest
    over the content keys only."""
    payload = {"format": CHECKPOINT_FORMAT, "model": model, "config": config, "vocab": WORDS,
               "state_dict": state_dict, "train_state": {}, "provenance": {"vltools_version": "0.1.0"}}
    payload["digest"] = content_digest({key: payload[key] for key in DIGEST_KEYS})
    torch.save(payload, path)


def _nodes(model, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    featmap, mask = torch.randn(2, 4, 5, 6, generator=g), torch.rand(2, 5, 6, generator=g)
    with torch.no_grad():
        return model.encoder(featmap, mask)[0]


def test_an_l2c_checkpoint_from_before_node_norm_pools_by_area_as_it_was_trained(tmp_path):
    torch.manual_seed(0)
    trained = build_model("l2c", {**TINY_L2C, "node_norm": "area"}, len(WORDS)).eval()
    _save_previous_format(tmp_path / "old.pt", "l2c", dict(TINY_L2C), trained.state_dict())
    loaded = model_from_checkpoint(load_checkpoint(tmp_path / "old.pt"), "old.pt")
    assert loaded.encoder.node_norm == "area"
    torch.testing.assert_close(_nodes(loaded), _nodes(trained))
    as_sum = build_model("l2c", {**TINY_L2C, "node_norm": "sum"}, len(WORDS)).eval()
    as_sum.load_state_dict(trained.state_dict())
    assert not torch.allclose(_nodes(loaded), _nodes(as_sum))  # today's default would have pooled differently


def test_a_new_checkpoint_records_its_schema_and_keeps_todays_meaning(tmp_path):
    torch.manual_seed(0)
    model = build_model("l2c", TINY_L2C, len(WORDS)).eval()
    save_checkpoint(tmp_path / "new.pt", "l2c", dict(TINY_L2C), model.state_dict(), vocab=WORDS,
                    schema=schema_version("l2c"))
    payload = load_checkpoint(tmp_path / "new.pt")
    assert payload["schema"] == 2 and payload["provenance"]["vltools_version"]
    assert model_from_checkpoint(payload).encoder.node_norm == "sum"


def test_a_setting_the_checkpoint_names_is_never_replaced():
    payload = {"model": "l2c", "config": {**TINY_L2C, "node_norm": "sum"}}
    assert checkpoint_config(payload)["node_norm"] == "sum"
    assert checkpoint_config({"model": "vse", "config": {}}) == {}
    assert schema_version("vse") == 1 and default_config("l2c")["node_norm"] == "sum"


def test_a_schema_newer_than_this_vltools_or_not_a_version_is_refused_in_one_line():
    payload = {"model": "l2c", "config": TINY_L2C, "schema": 3, "provenance": {"vltools_version": "9.0.0"}}
    with pytest.raises(VLToolsError, match=r"^m\.pt: model 'l2c' was saved with config schema 3 by vltools 9\.0\.0; "
                                           r"this vltools .* reads its schema 2 at most: upgrade vltools$"):
        checkpoint_config(payload, "m.pt")
    with pytest.raises(VLToolsError, match=r"^m\.pt: checkpoint's config schema 'two' is not a version"):
        checkpoint_config({**payload, "schema": "two"}, "m.pt")


def test_sizes_have_a_declared_maximum():
    with pytest.raises(VLToolsError, match=r"^model.embed_size must be in \[1, 1048576\], not 1000000000000$"):
        build_model("vse", {"embed_size": 10**12}, len(WORDS))
    with pytest.raises(VLToolsError, match=r"^model.gcn_steps must be in \[0, 1048576\], not 1048577$"):
        build_model("l2c", {"gcn_steps": 2**20 + 1}, len(WORDS))


def test_a_model_larger_than_the_machines_memory_is_refused_before_it_is_built(monkeypatch):
    # every size within its range, together 6.7 million million parameters: counted on the meta device, never built
    with pytest.raises(VLToolsError, match=r"^model 'vse' with these settings has 6,704,082,190,336 parameters, "
                                           r"24,974.7 GiB at 4 bytes each, more than this machine's .* GiB of memory; "
                                           r"make its sizes smaller$"):
        build_model("vse", {"embed_size": 2**20, "word_dim": 2**20}, 100_000)
    tiny = build_model("l2c", TINY_L2C, len(WORDS))
    count = sum(p.numel() for p in (*tiny.parameters(), *tiny.buffers()))
    monkeypatch.setattr(models, "machine_memory", lambda: count * 4)
    build_model("l2c", TINY_L2C, len(WORDS))  # exactly fits
    monkeypatch.setattr(models, "machine_memory", lambda: count * 4 - 1)
    with pytest.raises(VLToolsError, match=rf"^model 'l2c' with these settings has {count:,} parameters"):
        build_model("l2c", TINY_L2C, len(WORDS))


def test_a_matching_model_is_built_without_importing_torchvision():
    code = ("import sys; from vltools.models import MODELS, build_model; build_model('sgr', {'embed_size': 8, "
            "'sim_dim': 4, 'img_dim': 6, 'word_dim': 5}, 10); print('torchvision' in sys.modules, sorted(MODELS) "
            "== sorted(['adaptive-attention', 'bottom-up', 'clip', 'concepts', 'l2c', 'neuraltalk2', 'rmac', 'saf', "
            "'sco', 'sgr', 'vse']), MODELS['bottom-up'].__name__, 'torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "BottomUpAttention", "True"]


@pytest.mark.parametrize("name", ["neuraltalk2", "adaptive-attention"])
def test_a_captioner_checkpoint_from_before_feature_norm_feeds_raw_features_as_it_was_trained(tmp_path, name):
    torch.manual_seed(0)
    config = {"img_dim": 6, "embed_size": 4, "hidden_size": 6, "attention_size": 4}
    if name == "neuraltalk2":
        del config["attention_size"]
    trained = build_model(name, {**config, "feature_norm": "none"}, len(WORDS)).eval()
    _save_previous_format(tmp_path / "old.pt", name, dict(config), trained.state_dict())
    loaded = model_from_checkpoint(load_checkpoint(tmp_path / "old.pt"), "old.pt")
    assert checkpoint_config(load_checkpoint(tmp_path / "old.pt"))["feature_norm"] == "none"
    assert isinstance(loaded.norm, torch.nn.Identity)
    assert schema_version(name) == 2 and default_config(name)["feature_norm"] == "standard"


def _rmac_embedding(model) -> torch.Tensor:
    # 224 x 320 pixels: ResNet-18's 7 x 10 map, where the floored and the rounded grids place level 3 differently
    images = torch.randint(0, 256, (1, 3, 224, 320), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        return model.encode_images(images)


RMAC_CONFIG = {"backbone": "resnet18", "levels": 3, "scales": "1.0", "text": False, "frozen_bn": True}


def test_an_rmac_checkpoint_from_before_the_floored_grid_embeds_on_the_grid_it_was_trained_on(tmp_path):
    torch.manual_seed(0)
    trained = build_model("rmac", {**RMAC_CONFIG, "grid": "round"}, len(WORDS)).eval()
    _save_previous_format(tmp_path / "old.pt", "rmac", dict(RMAC_CONFIG), trained.state_dict())
    loaded = model_from_checkpoint(load_checkpoint(tmp_path / "old.pt"), "old.pt")
    assert loaded.grid == "round"
    torch.testing.assert_close(_rmac_embedding(loaded), _rmac_embedding(trained))
    floored = build_model("rmac", RMAC_CONFIG, len(WORDS)).eval()
    floored.load_state_dict(trained.state_dict())
    assert not torch.allclose(_rmac_embedding(floored), _rmac_embedding(trained), atol=1e-4)


def test_an_rmac_checkpoint_records_its_grid_and_one_written_after_the_floored_grid_keeps_it():
    assert default_config("rmac")["grid"] == "floor" and schema_version("rmac") == 1

    def grid(payload: dict) -> str:
        return {**default_config("rmac"), **checkpoint_config(payload, "m.pt")}["grid"]

    before = {"model": "rmac", "config": RMAC_CONFIG, "provenance": {"created": "2026-11-24T18:35:09+00:00"}}
    assert grid(before) == "round"
    assert grid({**before, "provenance": {"created": "2026-11-24T18:35:10+00:00"}}) == "floor"  # before schemas
    assert grid({**before, "provenance": {"created": "yesterday"}}) == "round"
    assert grid({**before, "schema": 1}) == "floor"   # schemas were recorded after the grid fix
    assert grid({**before, "config": {**RMAC_CONFIG, "grid": "floor"}}) == "floor"
    with pytest.raises(VLToolsError, match=r"^m\.pt: checkpoint's config schema 0 is not a version"):
        checkpoint_config({**before, "schema": 0}, "m.pt")


def test_counting_a_model_on_meta_imports_no_dynamo_and_leaves_every_initialiser_as_it_was():
    """Issue 50: a normal draw on the meta device imported torch._dynamo (about 1 s of every `match`); the count
    skips the draws of meta tensors alone, and the real model is initialised as before."""
    code = ("import sys, torch\n"
            "from torch import nn\n"
            "from vltools.models import NORMAL_INITS, build_model, check_model_size, default_config\n"
            "before = {name: getattr(nn.init, name) for name in NORMAL_INITS}\n"
            "check_model_size('sgr', default_config('sgr'), 100)\n"
            "print('torch._dynamo' in sys.modules, all(getattr(nn.init, n) is f for n, f in before.items()))\n"
            "torch.manual_seed(0)\n"
            "print(float(build_model('vse', {}, 100).state_dict()['txt_enc.embed.weight'].std()) > 0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
