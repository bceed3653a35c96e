"""OpenCLIP models built by the open_clip package itself: random (seeded) weights, weights files, pretrained tags from
open_clip's cache, and the one-line refusals (unknown architecture or tag, a tag offline and not cached). The
embeddings vltools computes equal open_clip's own `encode_image(preprocess(image))` / `encode_text(tokenizer(texts))`.
No test downloads anything: the cache is a temporary folder and connections are refused."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vltools
from vltools.errors import VLToolsError
from vltools.infer.loader import load_model
from vltools.io.model_store import OpenClipSpec
from vltools.vision.openclip import SEED, build_openclip

open_clip = pytest.importorskip("open_clip")
huggingface_hub = pytest.importorskip("huggingface_hub")

ROOT = Path(__file__).parent.parent
PHOTOS = ROOT / "tests/data/photos"
CAPTIONS = ROOT / "examples/demo/captions.jsonl"
BF16_TOLERANCE = 1e-2      # largest difference of a bf16 embedding's component from fp32 (measured: 1.6e-3)


@pytest.fixture(scope="module")
def reference():
    """open_clip's own ViT-B-32 with the seeded random weights, its preprocess and tokenizer."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32")
    return model.eval(), preprocess, open_clip.get_tokenizer("ViT-B-32")


@pytest.fixture(scope="module")
def loaded():
    return load_model("openclip:ViT-B-32:random", "encodable")


@pytest.fixture()
def offline(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and no connection anywhere (a test never downloads)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def refused(*args, **kwargs):
        raise OSError("network refused by the test")

    monkeypatch.setattr(socket, "create_connection", refused)
    return tmp_path / "hub"


def test_image_and_text_embeddings_equal_open_clips_own_in_fp32(loaded, reference):
    model, preprocess, tokenizer = reference
    paths = sorted(PHOTOS.iterdir())
    texts = [json.loads(line)["caption"] for line in CAPTIONS.read_text().splitlines()]
    with torch.no_grad():
        images = model.encode_image(torch.stack([preprocess(Image.open(path)) for path in paths]), normalize=True)
        captions = model.encode_text(tokenizer(texts), normalize=True)
    found = vltools.encode(PHOTOS, loaded, device="cpu")
    assert found.ids == [path.name for path in paths] and found.side == "images"
    np.testing.assert_allclose(found.vectors, images.numpy(), rtol=0, atol=1e-6)
    said = vltools.encode(CAPTIONS, loaded, device="cpu")
    assert said.side == "captions" and len(said.ids) == len(texts)
    np.testing.assert_allclose(said.vectors, captions.numpy(), rtol=0, atol=1e-6)
    for source, exact in ((PHOTOS, images), (CAPTIONS, captions)):
        low = vltools.encode(source, loaded, device="cpu", precision="bf16").vectors
        assert np.abs(low - exact.numpy()).max() < BF16_TOLERANCE
        assert (low * exact.numpy()).sum(axis=1).min() > 0.99


def test_random_weights_are_seeded_and_leave_the_global_random_state(loaded):
    state = torch.random.get_rng_state()
    again = build_openclip(OpenClipSpec("ViT-B-32", random=True))
    assert torch.equal(state, torch.random.get_rng_state())
    assert again.digest == loaded.digest and again.weights == f"random (seed {SEED})"
    assert all(torch.equal(a, b) for a, b in zip(again.model.state_dict().values(),
                                                  loaded.model.state_dict().values(), strict=True))
    provenance = loaded.clip.provenance()
    assert provenance["architecture"] == "ViT-B-32" and json.loads(provenance["preprocess"])["size"] == [224, 224]


def test_weights_files_load_without_pickle_and_record_their_digest(loaded, tmp_path):
    from safetensors.torch import save_file

    state = {key: value.contiguous() for key, value in loaded.model.state_dict().items()}
    save_file(state, tmp_path / "w.safetensors")
    torch.save(state, tmp_path / "w.pt")
    image = vltools.encode(PHOTOS / "china.jpg", loaded, device="cpu").vectors
    for name in ("w.safetensors", "w.pt"):
        other = load_model(f"openclip:ViT-B-32:{tmp_path / name}", "encodable")
        assert other.clip.weights == name and other.digest != loaded.digest
        np.testing.assert_array_equal(vltools.encode(PHOTOS / "china.jpg", other, device="cpu").vectors, image)
    torch.save({"state_dict": state, "opt": object()}, tmp_path / "pickled.pt")
    with pytest.raises(VLToolsError, match=r"pickled\.pt: not open_clip weights of ViT-B-32 that load without pickle"):
        load_model(f"openclip:ViT-B-32:{tmp_path / 'pickled.pt'}", "encodable")


def test_a_cached_pretrained_tag_loads_offline(loaded, offline):
    from safetensors.torch import save_file

    snapshot = offline / "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (offline / "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K" / "refs").mkdir()
    (offline / "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K" / "refs" / "main").write_text("0" * 40)
    save_file({k: v.contiguous() for k, v in loaded.model.state_dict().items()},
              snapshot / "open_clip_model.safetensors")
    tagged = load_model("openclip:ViT-B-32", "encodable")    # the default tag of ViT-B-32
    assert tagged.clip.weights == "laion2b_s34b_b79k" and tagged.digest != loaded.digest
    np.testing.assert_array_equal(vltools.encode(PHOTOS / "rocket.jpg", tagged, device="cpu").vectors,
                                  vltools.encode(PHOTOS / "rocket.jpg", loaded, device="cpu").vectors)


def test_a_pretrained_tag_offline_and_not_cached_is_one_line_naming_tag_cache_and_models_add(offline):
    with pytest.raises(VLToolsError) as error:
        load_model("openclip:ViT-B-16:laion2b_s34b_b88k", "encodable")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("openclip:ViT-B-16:laion2b_s34b_b88k: the pretrained weights ViT-B-16 "
                              "laion2b_s34b_b88k are not in open_clip's cache and cannot be downloaded from "
                              "laion/CLIP-ViT-B-16-laion2B-s34B-b88K/ (network refused by the test)")
    assert f"into {offline} (the Hugging Face hub cache" in message
    assert message.endswith("`vltools models add openclip:ViT-B-16:laion2b_s34b_b88k FILE`")


@pytest.mark.parametrize(("spec", "said"), [
    ("openclip:ViT-Q-99:random", "'ViT-Q-99' is not an open_clip architecture; use one of open_clip.list_models()"),
    ("openclip:ViT-B-32:laion9b", "'laion9b' is not a pretrained tag of ViT-B-32; its tags: openai, laion400m_e31"),
])
def test_an_unknown_architecture_or_tag_is_one_line(spec, said):
    with pytest.raises(VLToolsError, match=said):
        load_model(spec, "encodable")


def test_an_openclip_model_is_refused_where_a_checkpoint_of_another_role_is_needed():
    with pytest.raises(VLToolsError, match="openclip:ViT-B-32:random: a checkpoint of model 'openclip', not a "
                                           "captioner"):
        load_model("openclip:ViT-B-32:random", "captioner")
