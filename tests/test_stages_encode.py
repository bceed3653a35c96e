"""vltools.stages.encode: the one function `vltools encode` and `vltools.encode` call."""

from __future__ import annotations

import numpy as np
import pytest
from matching_helpers import make_world, save_overflowing, save_tiny

import vltools
import vltools.infer.encode as infer_encode
from vltools.cli import main
from vltools.errors import ArgumentError, VLToolsError
from vltools.io.embeddings import read_embeddings
from vltools.stages.encode import encode


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encode")
    features, captions = make_world(folder, n_images=6, per_image=3)
    return features, captions, save_tiny(folder / "vse.pt", "vse")


def test_written_or_returned_and_the_command_writes_what_the_api_returns(world, tmp_path):
    features, captions, vse = world
    main(["-q", "encode", str(captions), "--model", str(vse), "-o", str(tmp_path / "cli.h5")])
    assert encode(captions, vse, tmp_path / "stage.h5") is None        # written, not read back
    returned = encode(captions, vse)
    api = vltools.encode(captions, vse, tmp_path / "api.h5")           # the API reads back what it wrote
    for path in ("cli.h5", "stage.h5", "api.h5"):
        written = read_embeddings(tmp_path / path)
        assert written.ids == returned.ids == api.ids
        np.testing.assert_array_equal(written.vectors, returned.vectors)


def test_bad_arguments_are_refused_in_pythons_words(world, tmp_path):
    features, captions, vse = world
    with pytest.raises(ArgumentError, match="^resume needs output=PATH"):
        encode(captions, vse, resume=True)
    with pytest.raises(ArgumentError, match="^checkpoint_seconds must be"):
        encode(captions, vse, tmp_path / "x.h5", checkpoint_seconds=-1)
    with pytest.raises(ArgumentError, match="firts"):
        encode(features, vse, firts=3)
    assert list(tmp_path.iterdir()) == []


def test_embeddings_returned_in_memory_never_go_through_a_file(world, monkeypatch, tmp_path):
    """`encode(output=None)` wrote its embeddings to a temporary HDF5 and read them back."""
    features, captions, vse = world
    written = encode(captions, vse, tmp_path / "e.h5")
    assert written is None
    monkeypatch.setattr(infer_encode, "write_embeddings", lambda *args: pytest.fail("written to a file"))
    returned = encode(captions, vse)
    np.testing.assert_array_equal(returned.vectors, read_embeddings(tmp_path / "e.h5").vectors)
    assert returned.side == "captions" and returned.attrs["checkpoint_digest"] == \
        read_embeddings(tmp_path / "e.h5").attrs["checkpoint_digest"]


def test_non_finite_embeddings_are_the_same_one_line_from_the_api_as_from_the_command(world, tmp_path, capsys):
    features, _, _ = world
    model = save_overflowing(tmp_path / "overflowing.pt", "vse")
    advice = "the model gave NaN or infinite embeddings under {}; run with {} (or bf16, which keeps float32's range)"
    with pytest.raises(VLToolsError) as error:
        vltools.encode(features, model, precision="fp16", device="cpu")
    image = str(error.value).split(":", 1)[0]
    assert str(error.value) == f"{image}: " + advice.format("precision=fp16", "precision=fp32")
    with pytest.raises(SystemExit):
        main(["-q", "encode", str(features), "--model", str(model), "--precision", "fp16", "--device", "cpu",
              "-o", str(tmp_path / "e.h5")])
    assert capsys.readouterr().err == f"vltools: error: {image}: " + advice.format("--precision fp16",
                                                                                   "--precision fp32") + "\n"
