"""Typed queries in the library: each is checked (blank, a control character, too long to quote whole) and the
checkpoint that encodes them must be the one the searched images record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch import nn

from vltools.errors import VLToolsError
from vltools.infer.loader import LoadedModel
from vltools.infer.query import Gallery, check_built_by, checked_queries
from vltools.io.checkpoints import file_digest


def test_queries_lose_their_surrounding_blanks():
    assert checked_queries(["  a red cube\n", "two dogs"]) == ["a red cube", "two dogs"]


@pytest.mark.parametrize(("queries", "message"), [
    ([], "no query given; give queries=TEXT (texts; image files for an rmac model)"),
    (["a cat", "\t \n"], "query 2 of 2 is empty; give one line of text a query"),
    (["a\u202ecat"], "query 1 of 1 ('a\\u202ecat') holds the bidirectional control U+202E"),
    (["x" * 5000 + "\0"], f"query 1 of 1 ('{'x' * 40}...') holds the control character '\\x00'"),
], ids=["none", "blank", "bidi", "long"])
def test_a_bad_query_is_named_shortly(queries, message):
    with pytest.raises(VLToolsError) as error:
        checked_queries(queries)
    assert str(error.value).startswith(message) and len(str(error.value)) < 200


def gallery(digest: str | None) -> Gallery:
    return Gallery(Path("images.index.h5"), ["i0"], "images", digest, "vse.pt",
                   lambda queries, k: (np.zeros((len(queries), k)), np.zeros((len(queries), k), dtype=int)))


def test_the_images_must_record_the_digest_of_the_query_model(tmp_path):
    (tmp_path / "vse.pt").write_bytes(b"weights")
    loaded = LoadedModel(tmp_path / "vse.pt", "vse", nn.Identity(), ["a"], {}, {})
    digest = file_digest(tmp_path / "vse.pt")
    check_built_by(gallery(digest), loaded)
    with pytest.raises(VLToolsError, match=r"^images.index.h5: records no checkpoint digest, so whether "):
        check_built_by(gallery(None), loaded)
    with pytest.raises(VLToolsError) as error:
        check_built_by(gallery("0123456789abcdef"), loaded)
    assert str(error.value) == (f"model={tmp_path / 'vse.pt'}: another checkpoint ({digest}) than the one that "
                                "encoded the embeddings of images.index.h5 (0123456789abcdef, vse.pt); search them "
                                "with that checkpoint")
