"""Backbones: last-stage shapes, weights from the torch hub cache, files and checkpoints; offline errors."""

from __future__ import annotations

import urllib.error

import pytest
import torch
import torchvision

from vltools.errors import VLToolsError
from vltools.io.checkpoints import save_checkpoint
from vltools.vision import backbones
from vltools.vision.backbones import build_backbone, normalize, trunk_state_dict


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty torch hub cache and a download that fails like a machine without network."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    calls = []

    def no_network(url, destination, hash_prefix):
        calls.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(backbones, "_download", no_network)
    return tmp_path / "torch" / "hub" / "checkpoints", calls


@pytest.mark.parametrize("name, stride, dim", [("resnet18", 32, 512), ("vgg19", 16, 512)])
def test_last_stage_shape_and_stride(name, stride, dim):
    torch.manual_seed(0)
    model, described = build_backbone(name, "none")
    assert described == "none" and (model.stride, model.dim) == (stride, dim)
    with torch.inference_mode():
        out = model(torch.randn(1, 3, 64, 96))
    assert tuple(out.shape) == (1, dim, 64 // stride, 96 // stride)


def test_imagenet_offline_names_file_url_and_cache_folder(offline_cache):
    folder, calls = offline_cache
    with pytest.raises(VLToolsError) as info:
        build_backbone("resnet18", "imagenet")
    message = str(info.value)
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    assert calls == [url]
    assert "resnet18-f37072fd.pth" in message and url in message and str(folder) in message
    assert "\n" not in message and message.count(". ") == 0


def test_imagenet_weights_come_from_the_cache_without_download(offline_cache):
    folder, calls = offline_cache
    folder.mkdir(parents=True)
    reference = torchvision.models.resnet18(weights=None)
    torch.save(reference.state_dict(), folder / "resnet18-f37072fd.pth")
    model, described = build_backbone("resnet18", "imagenet")
    assert calls == [] and "ResNet18_Weights.IMAGENET1K_V1" in described
    assert torch.equal(model.trunk[0].weight, reference.conv1.weight)
    assert torch.equal(model.trunk[7][1].bn2.running_mean, reference.layer4[1].bn2.running_mean)


def test_weights_file_and_prefixed_vltools_checkpoint(tmp_path):
    reference = torchvision.models.resnet18(weights=None)
    plain = tmp_path / "plain.pt"
    torch.save(reference.state_dict(), plain)
    trunk_only = {f"backbone.{k}": v for k, v in reference.state_dict().items() if not k.startswith("fc.")}
    checkpoint = tmp_path / "model.pt"
    save_checkpoint(checkpoint, "rmac", {}, trunk_only, schema=1)
    for path in (plain, checkpoint):
        model, described = build_backbone("resnet18", str(path))
        assert torch.equal(model.trunk[0].weight, reference.conv1.weight)
        assert path.name in described and "sha256" in described


@pytest.mark.parametrize("name", ["resnet18", "vgg19"])
def test_a_trunk_saved_headless_loads_back_as_the_same_backbone(name, tmp_path):
    torch.manual_seed(0)
    trained = build_backbone(name, "none")[0]
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(torch.randn_like(parameter))   # anything but torchvision's initialisation
    state = trunk_state_dict(name, trained.trunk)
    model = getattr(torchvision.models, name)(weights=None)
    heads = {key for key in model.state_dict() if key.startswith(("fc.", "classifier."))}
    assert heads and set(state) == set(model.state_dict()) - heads
    torch.save(state, tmp_path / "trunk.pt")
    torch.manual_seed(1)
    loaded = build_backbone(name, str(tmp_path / "trunk.pt"))[0]
    images = torch.randn(2, 3, 64, 64)
    with torch.inference_mode():
        assert torch.equal(loaded(images), trained.eval()(images))


def test_wrong_weights_file_is_a_one_line_error(tmp_path):
    other = tmp_path / "vgg.pt"
    torch.save(torchvision.models.vgg11(weights=None).state_dict(), other)
    with pytest.raises(VLToolsError, match="do not fit this model"):
        build_backbone("resnet18", str(other))
    junk = tmp_path / "junk.pt"
    junk.write_text("not torch")
    with pytest.raises(VLToolsError, match="junk.pt: not a state dict: it is neither a torch zip archive nor a pickle"):
        build_backbone("resnet18", str(junk))
    with pytest.raises(VLToolsError, match="no such weights file"):
        build_backbone("resnet18", str(tmp_path / "missing.pt"))
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(VLToolsError, match="empty.pt: empty file, not a state dict"):
        build_backbone("resnet18", str(tmp_path / "empty.pt"))


def test_normalize_matches_imagenet_statistics():
    images = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
    expected = [(1 - m) / s for m, s in zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), strict=True)]
    assert torch.allclose(normalize(images)[0, :, 0, 0], torch.tensor(expected))
