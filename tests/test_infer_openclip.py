"""OpenCLIP in the stages: encode of images (bad ones skipped, counted, recorded) and captions into embeddings files
that match, search and score take; zero-shot match; CLIP as the first stage of a rerank; the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from matching_helpers import make_world, save_tiny

import vltools
from vltools.cli import main
from vltools.errors import VLToolsError
from vltools.infer.loader import load_model
from vltools.infer.openclip import captions_given
from vltools.io.records import write_records

pytest.importorskip("open_clip")

ROOT = Path(__file__).parent.parent
PHOTOS = ROOT / "tests/data/photos"
CAPTIONS = ROOT / "examples/demo/captions.jsonl"
MODEL = "openclip:ViT-B-32:random"


@pytest.fixture(scope="module")
def loaded():
    return load_model(MODEL, "encodable")


@pytest.fixture()
def photos(tmp_path):
    """The project's photos and one file that is no image."""
    folder = tmp_path / "photos"
    shutil.copytree(PHOTOS, folder)
    (folder / "broken.jpg").write_bytes(b"not an image")
    return folder


def test_bad_images_are_skipped_counted_and_recorded(loaded, photos, tmp_path):
    found = vltools.encode(photos, loaded, device="cpu", batch_size=2)
    assert found.ids == sorted(path.name for path in PHOTOS.iterdir()) and found.attrs["num_failed"] == 1
    vltools.encode(photos, loaded, tmp_path / "img.h5", device="cpu", batch_size=2)
    with h5py.File(tmp_path / "img.h5") as handle:
        assert handle.attrs["num_failed"] == 1 and handle.attrs["model"] == "openclip"
        assert handle["failed"][0].decode().startswith("broken.jpg\tnot an image file")
        np.testing.assert_array_equal(handle["emb"][()], found.vectors)
    (photos / "broken.jpg").unlink()
    for path in photos.iterdir():
        path.write_bytes(b"")
    with pytest.raises(VLToolsError, match=r"every one of the 5 images failed \(first: chelsea.png: empty file"):
        vltools.encode(photos, loaded, device="cpu")


def test_captions_are_told_from_images(tmp_path):
    write_records(tmp_path / "images.jsonl", [{"image_id": "a", "path": str(PHOTOS / "china.jpg")}])
    assert captions_given(CAPTIONS)
    assert not captions_given(PHOTOS) and not captions_given(tmp_path / "images.jsonl")
    assert not captions_given([CAPTIONS, CAPTIONS])


def test_zero_shot_match_ranks_as_the_embeddings_files_do_and_scores(loaded, tmp_path):
    direct = vltools.match(PHOTOS, CAPTIONS, loaded, device="cpu")
    images = vltools.encode(PHOTOS, loaded, device="cpu")
    captions = vltools.encode(CAPTIONS, loaded, device="cpu")
    via_files = vltools.match(images, captions, device="cpu")
    np.testing.assert_allclose(direct.sims, images.vectors @ captions.vectors.T, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(direct.forward[1], via_files.forward[1])
    np.testing.assert_array_equal(direct.backward[1], via_files.backward[1])
    assert direct.attrs["architecture"] == "ViT-B-32" and direct.attrs["checkpoint_digests"] == loaded.digest
    assert set(vltools.score_retrieval(direct)) >= {"i2t", "t2i", "rsum"}
    found = vltools.search("a cat with black stripes", images, model=loaded, top_k=5)
    text = vltools.encode([{"image_id": "x", "caption": "a cat with black stripes"}], loaded, device="cpu")
    assert found.forward[1][0].tolist() == np.argsort(-(images.vectors @ text.vectors[0]), kind="stable").tolist()


def test_zero_shot_match_refuses_images_the_captions_name_but_the_folder_lacks(loaded, tmp_path):
    folder = tmp_path / "some"
    folder.mkdir()
    shutil.copy(PHOTOS / "china.jpg", folder)
    with pytest.raises(VLToolsError, match=r"some: 4 of the 5 images the captions name are not in it"):
        vltools.match(folder, CAPTIONS, loaded, device="cpu")


def test_clip_first_stage_of_everything_reranks_to_the_full_match(loaded, tmp_path):
    features, captions = make_world(tmp_path)
    sgr = save_tiny(tmp_path / "sgr.pt", "sgr")
    photos = sorted(PHOTOS.iterdir())
    write_records(tmp_path / "images.jsonl", [{"image_id": f"img{i}", "path": str(photos[i % len(photos)])}
                                              for i in range(9)])
    full = vltools.match(features, captions, sgr, device="cpu", top_k=21)
    two = vltools.match(features, captions, sgr, device="cpu", top_k=21, rerank_k=21, first_stage=loaded,
                        first_stage_images=tmp_path / "images.jsonl")
    np.testing.assert_array_equal(two.forward[1], full.forward[1])
    np.testing.assert_array_equal(two.backward[1], full.backward[1])
    with pytest.raises(VLToolsError, match="embeds image files: give them with first_stage_images=IMAGES"):
        vltools.match(features, captions, sgr, device="cpu", rerank_k=3, first_stage=loaded)


def test_the_commands_encode_match_search_and_score(tmp_path, capsys):
    out = tmp_path
    main(["--quiet", "encode", str(PHOTOS), "--model", MODEL, "-o", str(out / "img.h5")])
    main(["--quiet", "encode", str(CAPTIONS), "--model", MODEL, "-o", str(out / "cap.h5")])
    main(["--quiet", "match", str(out / "img.h5"), str(out / "cap.h5"), "--sims", str(out / "sims.h5"), "-o",
          str(out / "ranks.jsonl")])
    main(["--quiet", "match", str(PHOTOS), str(CAPTIONS), "--model", MODEL, "--sims", str(out / "direct.h5"),
          "-o", str(out / "direct.jsonl")])
    with h5py.File(out / "sims.h5") as one, h5py.File(out / "direct.h5") as two:
        np.testing.assert_allclose(one["sims"][()], two["sims"][()], rtol=0, atol=1e-6)
    main(["--quiet", "search", str(out / "img.h5"), "--model", MODEL, "-q", "a rocket", "-o",
          str(out / "found.jsonl")])
    found = json.loads((out / "found.jsonl").read_text())
    assert found["query"] == "a rocket" and sorted(found["ids"]) == sorted(p.name for p in PHOTOS.iterdir())
    capsys.readouterr()
    main(["--quiet", "score", "retrieval", str(out / "sims.h5")])
    assert json.loads(capsys.readouterr().out)["n_images"] == 5


def test_the_options_an_openclip_model_does_not_read_are_refused(loaded):
    with pytest.raises(VLToolsError, match="image_size is not read by the OpenCLIP model"):
        vltools.encode(PHOTOS, loaded, image_size=64)
    with pytest.raises(VLToolsError, match="ranks the images and captions on its own"):
        vltools.match(PHOTOS, CAPTIONS, [MODEL, MODEL])
