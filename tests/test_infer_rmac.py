"""encode_rmac with tiny random resnet18 R-MAC checkpoints (image + text, and image only) on 40x48 images: its
refusals (--with-text without a proxy, text on a V-only model, a proxy of another vocabulary or without the split,
images missing, unknown modifier words), and queries as l2norm(phi + theta_text + theta_add - theta_subtract)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from PIL import Image

from vltools.errors import VLToolsError
from vltools.infer.loader import load_model
from vltools.infer.rmac import QueryOptions, encode_rmac
from vltools.io.checkpoints import save_checkpoint
from vltools.io.proxy import ProxyFile, write_proxy
from vltools.models import build_model

VOCAB = ["blue", "cat", "dog", "green", "red", "tree"]
IDS = [f"im{i}" for i in range(6)]
SPLITS = ["train", "train", "test", "test", "test", "test"]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rmac")
    rng = np.random.default_rng(0)
    with open(folder / "images.jsonl", "w", encoding="utf-8") as images:
        for i, image_id in enumerate(IDS):
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
            images.write(json.dumps({"image_id": image_id, "path": f"{i}.png"}) + "\n")
    dense = rng.random((6, 6)) * (rng.random((6, 6)) < 0.5)
    dense[:, 0] += 0.1
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    proxy = ProxyFile(IDS, SPLITS, sp.csr_matrix(dense.astype(np.float32)), VOCAB, np.ones(6),
                      np.full((6, 1), -1), np.full((6, 1), np.nan, dtype=np.float32))
    write_proxy(folder / "proxy.h5", proxy, {})
    write_proxy(folder / "other_vocab.h5", ProxyFile(**{**proxy.__dict__, "vocab": [*VOCAB[:-1], "trees"]}), {})
    checkpoints = {}
    for text in (True, False):
        torch.manual_seed(0)
        config = {"backbone": "resnet18", "levels": 3, "scales": "1.0", "text": text, "frozen_bn": True}
        model = build_model("rmac", config, len(VOCAB))
        path = folder / ("vt.pt" if text else "v.pt")
        save_checkpoint(path, "rmac", config, model.state_dict(), vocab=VOCAB,
                        train_state={"config": {"task": {"image_size": 32}}}, schema=1)
        checkpoints[text] = load_model(path, "encodable")
    return folder, dense, checkpoints


def encode(world, text_model: bool, **options):
    folder, _, checkpoints = world
    return encode_rmac(checkpoints[text_model], folder / "images.jsonl", QueryOptions(**options), CPU)


def refused(world, text_model: bool, **options) -> str:
    with pytest.raises(VLToolsError) as exc:
        encode(world, text_model, **options)
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---- refusals ------------------------------------------------------------------------------------------------------

def test_with_text_without_a_proxy_is_refused(world):
    message = refused(world, True, with_text=True)
    assert message == "--with-text embeds each image's captions: give --proxy PROXY.h5 (their tf-idf rows)"


@pytest.mark.parametrize("text", [{"add": ["dog"]}, {"subtract": ["red"]}, {"with_text": True},
                                  {"add": ["dog"], "subtract": ["red"], "with_text": True}],
                         ids=["add", "subtract", "with-text", "all"])
def test_text_on_a_model_trained_without_text_is_refused_naming_the_checkpoint(world, text):
    folder, _, _ = world
    message = refused(world, False, proxy=str(folder / "proxy.h5"), **text)
    assert message.startswith(f"{folder / 'v.pt'}: the model was trained without text (task.loss v)")
    assert "--with-text / --add / --subtract" in message and "task.loss=vt" in message


def test_a_proxy_of_another_vocabulary_is_refused_naming_it(world):
    folder, _, _ = world
    message = refused(world, True, proxy=str(folder / "other_vocab.h5"))
    assert message.startswith(f"{folder / 'other_vocab.h5'}: its vocabulary differs from the one "
                              f"{folder / 'vt.pt'} was trained with")


def test_a_split_absent_from_the_proxy_is_refused(world):
    folder, _, _ = world
    message = refused(world, True, proxy=str(folder / "proxy.h5"), split="val")
    assert message.startswith(f"{folder / 'proxy.h5'}: no image in split 'val'") and "--split" in message


def test_proxy_images_missing_from_the_images_are_named(world, tmp_path):
    folder, _, _ = world
    lines = (folder / "images.jsonl").read_text(encoding="utf-8").splitlines()
    images = tmp_path / "images.jsonl"
    images.write_text("".join(json.dumps({**json.loads(line), "path": str(folder / json.loads(line)["path"])}) + "\n"
                              for line in lines if json.loads(line)["image_id"] not in ("im3", "im5")),
                      encoding="utf-8")
    _, _, checkpoints = world
    with pytest.raises(VLToolsError) as exc:
        encode_rmac(checkpoints[True], images, QueryOptions(proxy=str(folder / "proxy.h5")), CPU)
    assert str(exc.value).startswith(f"{images}: 2 images of the proxy are not in it: 'im3', 'im5'")


@pytest.mark.parametrize(("option", "field"), [("--add", "add"), ("--subtract", "subtract")])
def test_a_modifier_word_outside_the_vocabulary_is_refused_naming_it(world, option, field):
    folder, _, _ = world
    message = refused(world, True, proxy=str(folder / "proxy.h5"), first=1, **{field: ["dog", "zebra"]})
    assert message.startswith(f"{option} 'zebra'") and str(folder / "vt.pt") in message


# ---- what it embeds ------------------------------------------------------------------------------------------------

def test_database_images_without_a_proxy_are_every_image_in_file_order(world):
    ids, emb, attrs = encode(world, False, first=3)
    assert ids == ["im0", "im1", "im2"] and emb.shape == (3, 512) and emb.dtype == np.float32
    assert attrs == {"side": "images", "query": "image", "image_size": 32, "split": "all"}
    assert encode(world, False, first=1, image_size=24)[2]["image_size"] == 24


def test_queries_with_text_and_modifiers_are_the_normalised_sum(world):
    folder, dense, checkpoints = world
    proxy = str(folder / "proxy.h5")
    ids, phi, attrs = encode(world, True, proxy=proxy, first=3)
    assert ids == ["im2", "im3", "im4"] and attrs["split"] == "test" and attrs["query"] == "image"
    query_ids, query, attrs = encode(world, True, proxy=proxy, first=3, with_text=True, add=["dogs"],
                                     subtract=["red"])
    assert query_ids == ids and attrs["query"] == "image + its captions + dogs - red"
    model = checkpoints[True].model
    with torch.no_grad():
        weight = model.text.weight.double().numpy()          # (D, V): theta(t) = l2norm(W t)

    def theta(t: np.ndarray) -> np.ndarray:
        out = t @ weight.T
        return out / np.linalg.norm(out, axis=-1, keepdims=True)

    one_hot = np.eye(len(VOCAB))
    expected = phi + theta(dense[[2, 3, 4]]) + theta(one_hot[VOCAB.index("dog")]) - theta(one_hot[VOCAB.index("red")])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(query, expected, atol=1e-5)
