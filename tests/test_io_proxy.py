"""The proxy HDF5 file: write_proxy / read_proxy_file round trip, read_proxy's CSR checks (one line naming the file
and /tfidf), non-finite values refused by id, Csr.take against dense products, Proxy.rows' refusals."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from vltools.errors import VLToolsError
from vltools.io.features import FeaturesWriter
from vltools.io.hdf5 import write_arrays
from vltools.io.proxy import Csr, Proxy, ProxyFile, proxy_words, read_proxy, read_proxy_file, write_proxy

IDS = ["a", "b", "c", "d"]
DENSE = np.array([[0.6, 0.8, 0.0],      # rows l2-normalised; "c" has no vocabulary stem
                  [0.0, 0.0, 1.0],
                  [0.0, 0.0, 0.0],
                  [0.8, 0.0, 0.6]], dtype=np.float32)


def hand_proxy() -> ProxyFile:
    neighbors = np.array([[3, 1], [0, 3], [-1, -1], [0, 1]], dtype=np.int64)
    sims = np.array([[0.48, 0.0], [0.0, 0.6], [np.nan, np.nan], [0.48, 0.6]], dtype=np.float32)
    return ProxyFile(list(IDS), ["train", "train", "val", "train"], sp.csr_matrix(DENSE), ["cat", "dog", "run"],
                     np.array([0.5, 1.25, np.log(3.0)]), neighbors, sims)


def csr_arrays(dense: np.ndarray) -> dict[str, np.ndarray]:
    matrix = sp.csr_matrix(dense)
    return {"tfidf/data": matrix.data.astype(np.float32), "tfidf/indices": matrix.indices.astype(np.int32),
            "tfidf/indptr": matrix.indptr.astype(np.int64), "tfidf/shape": np.array(dense.shape, dtype=np.int64)}


def dense_to_csr(dense: np.ndarray) -> Csr:
    """A Csr built directly from the nonzeros of a dense matrix (row-major), independent of scipy."""
    rows, cols = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))]).astype(np.int64)
    return Csr(dense[rows, cols], cols.astype(np.int64), indptr, dense.shape[1])


# ---- round trip ----------------------------------------------------------------------------------------------------

def test_write_then_read_gives_back_every_array(tmp_path):
    path = tmp_path / "proxy.h5"
    original = hand_proxy()
    write_proxy(path, original, {"method": "captions", "k": 2})
    back = read_proxy_file(path)
    assert back.ids == IDS and back.splits == ["train", "train", "val", "train"]
    assert back.vocab == ["cat", "dog", "run"]
    np.testing.assert_array_equal(back.tfidf.toarray(), DENSE)
    assert back.tfidf.shape == (4, 3) and back.tfidf[2].nnz == 0
    np.testing.assert_array_equal(back.idf, [0.5, 1.25, np.log(3.0)])
    assert back.neighbors.dtype == np.int64 and back.neighbors.tolist() == original.neighbors.tolist()
    assert back.neighbor_sims.dtype == np.float32
    np.testing.assert_array_equal(back.neighbor_sims, original.neighbor_sims)      # NaN where there is none
    assert back.split_rows("train").tolist() == [0, 1, 3] and back.split_rows("val").tolist() == [2]
    assert back.split_rows("test").tolist() == []
    with h5py.File(path) as handle:
        assert handle.attrs["format"] == "vltools.proxy" and handle.attrs["method"] == "captions"
        assert int(handle.attrs["k"]) == 2
    scoring = read_proxy(path)                  # what `score semantic` reads: ids and the CSR
    assert scoring.ids == IDS and scoring.tfidf.n_rows == 4 and scoring.tfidf.n_cols == 3
    assert scoring.tfidf.indptr.tolist() == [0, 2, 3, 3, 5]
    assert scoring.tfidf.indices.tolist() == [0, 1, 2, 0, 2]


def test_how_words_were_counted_is_read_back_and_an_older_file_counted_occurrences(tmp_path):
    write_proxy(tmp_path / "new.h5", hand_proxy(), {"method": "captions", "words": "distinct"})
    write_proxy(tmp_path / "old.h5", hand_proxy(), {"method": "captions"})
    assert proxy_words(tmp_path / "new.h5") == "distinct" and proxy_words(tmp_path / "old.h5") == "occurrences"


def test_write_leaves_no_temporary_file(tmp_path):
    write_proxy(tmp_path / "proxy.h5", hand_proxy(), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proxy.h5"]


def test_another_kind_of_file_is_refused(tmp_path):
    path = tmp_path / "feats.h5"
    with FeaturesWriter(path, {"backbone": "tiny"}, dtype="float32") as writer:
        writer.add(["a"], **{"global": np.ones((1, 2), dtype=np.float32)})
    with pytest.raises(VLToolsError, match="expected a vltools proxy file") as exc:
        read_proxy(path)
    assert str(exc.value).startswith(str(path))


# ---- read_proxy: the CSR checks ------------------------------------------------------------------------------------

def corrupt(name: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The valid CSR of DENSE with one corruption."""
    if name == "indptr not starting at 0":
        arrays["tfidf/indptr"] = np.array([1, 2, 3, 3, 5])
    elif name == "indptr decreasing":
        arrays["tfidf/indptr"] = np.array([0, 3, 2, 3, 5])
    elif name == "indptr not ending at the value count":
        arrays["tfidf/indptr"] = np.array([0, 2, 3, 3, 4])
    elif name == "column out of range":
        arrays["tfidf/indices"] = np.array([0, 1, 3, 0, 2], dtype=np.int32)
    elif name == "negative column":
        arrays["tfidf/indices"] = np.array([0, -1, 2, 0, 2], dtype=np.int32)
    elif name == "fewer indices than values":
        arrays["tfidf/indices"] = arrays["tfidf/indices"][:4]
    elif name == "shape rows other than ids":
        arrays["tfidf/shape"] = np.array([5, 3])
    elif name == "indptr of another length":
        arrays["tfidf/indptr"] = np.array([0, 2, 3, 5])
    elif name == "shape of three numbers":
        arrays["tfidf/shape"] = np.array([4, 3, 1])
    return arrays


@pytest.mark.parametrize("name", ["indptr not starting at 0", "indptr decreasing",
                                  "indptr not ending at the value count", "column out of range", "negative column",
                                  "fewer indices than values", "shape rows other than ids", "indptr of another length",
                                  "shape of three numbers"])
def test_an_inconsistent_csr_is_one_line_naming_the_file_and_tfidf(tmp_path, name):
    path = tmp_path / "bad.h5"
    write_arrays(path, "proxy", {"ids": IDS, **corrupt(name, csr_arrays(DENSE))})
    with pytest.raises(VLToolsError) as exc:
        read_proxy(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: /tfidf: inconsistent CSR matrix") and "\n" not in message
    assert "tfidf-proxy" in message


def test_the_uncorrupted_csr_is_accepted(tmp_path):
    path = tmp_path / "good.h5"
    write_arrays(path, "proxy", {"ids": IDS, **corrupt("none", csr_arrays(DENSE))})
    assert read_proxy(path).tfidf.n_rows == 4


@pytest.mark.parametrize("missing", ["ids", "tfidf/data", "tfidf/indices", "tfidf/indptr", "tfidf/shape"])
def test_a_missing_dataset_is_named(tmp_path, missing):
    path = tmp_path / "bad.h5"
    arrays = {"ids": IDS, **csr_arrays(DENSE)}
    del arrays[missing]
    write_arrays(path, "proxy", arrays)
    with pytest.raises(VLToolsError, match=f"proxy file lacks /{missing}") as exc:
        read_proxy(path)
    assert str(exc.value).startswith(str(path))


def test_a_nan_tfidf_value_is_refused_naming_its_image(tmp_path):
    arrays = csr_arrays(DENSE)
    arrays["tfidf/data"][4] = np.nan          # the second value of "d" (values: a a b d d)
    path = tmp_path / "nan.h5"
    write_arrays(path, "proxy", {"ids": IDS, **arrays})
    with pytest.raises(VLToolsError, match=r"id 'd': /tfidf/data holds NaN") as exc:
        read_proxy(path)
    assert str(exc.value).startswith(str(path))


# ---- read_proxy_file: the rest of the file -------------------------------------------------------------------------

def full_arrays(proxy: ProxyFile) -> dict[str, object]:
    return {"ids": proxy.ids, "splits": proxy.splits, **csr_arrays(proxy.tfidf.toarray()), "vocab": proxy.vocab,
            "idf": proxy.idf, "neighbors": proxy.neighbors.astype(np.int32), "neighbor_sims": proxy.neighbor_sims}


@pytest.mark.parametrize("missing", ["splits", "vocab", "idf", "neighbors", "neighbor_sims"])
def test_read_proxy_file_names_a_missing_dataset(tmp_path, missing):
    arrays = full_arrays(hand_proxy())
    del arrays[missing]
    path = tmp_path / "bad.h5"
    write_arrays(path, "proxy", arrays)
    with pytest.raises(VLToolsError, match=f"proxy file lacks /{missing}") as exc:
        read_proxy_file(path)
    assert str(exc.value).startswith(str(path))


@pytest.mark.parametrize("field", ["splits", "vocab", "idf", "neighbors", "neighbor_sims"])
def test_read_proxy_file_refuses_arrays_of_the_wrong_length(tmp_path, field):
    arrays = full_arrays(hand_proxy())
    arrays[field] = arrays[field][:-1]
    path = tmp_path / "bad.h5"
    write_arrays(path, "proxy", arrays)
    with pytest.raises(VLToolsError, match="inconsistent proxy file") as exc:
        read_proxy_file(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)


def test_a_nan_idf_is_refused_naming_its_stem(tmp_path):
    proxy = hand_proxy()
    proxy.idf[1] = np.inf
    path = tmp_path / "bad.h5"
    write_proxy(path, proxy, {})
    with pytest.raises(VLToolsError, match=r"stem 'dog': /idf holds NaN or infinite values"):
        read_proxy_file(path)


def test_a_nan_similarity_of_a_real_neighbour_is_refused_naming_the_image(tmp_path):
    proxy = hand_proxy()
    proxy.neighbor_sims[3, 1] = np.nan        # d's second neighbour (b) exists
    path = tmp_path / "bad.h5"
    write_proxy(path, proxy, {})
    with pytest.raises(VLToolsError, match=r"id 'd': /neighbor_sims holds NaN"):
        read_proxy_file(path)


@pytest.mark.parametrize("bad", [6, 99, -2])
def test_a_neighbour_that_is_no_row_is_refused_naming_the_file(tmp_path, bad):
    proxy = hand_proxy()
    proxy.neighbors[1, 0] = bad                # 4 images: rows 0..3, -1 for none
    path = tmp_path / "bad.h5"
    write_proxy(path, proxy, {})
    with pytest.raises(VLToolsError) as exc:
        read_proxy_file(path)
    assert str(exc.value).startswith(str(path)) and "neighbors" in str(exc.value)


# ---- Csr.take -----------------------------------------------------------------------------------------------

def test_take_gives_rows_in_the_order_asked_with_repeats_and_empty_rows():
    dense = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 3.0], [0.0, 4.0, 5.0]])
    taken = dense_to_csr(dense).take(np.array([3, 1, 0, 3]))
    assert taken.n_rows == 4 and taken.n_cols == 3
    rebuilt = np.zeros((4, 3))
    for row in range(4):
        for k in range(taken.indptr[row], taken.indptr[row + 1]):
            rebuilt[row, taken.indices[k]] = taken.data[k]
    np.testing.assert_array_equal(rebuilt, dense[[3, 1, 0, 3]])
    assert dense_to_csr(dense).take(np.array([], dtype=np.int64)).n_rows == 0


# ---- Proxy ---------------------------------------------------------------------------------------------------------

def test_rows_of_known_ids(tmp_path):
    path = tmp_path / "proxy.h5"
    write_proxy(path, hand_proxy(), {})
    assert read_proxy(path).rows(["d", "a", "d"], "sims.h5", "queries").tolist() == [3, 0, 3]


def test_rows_refuse_unknown_ids_naming_them_the_source_and_the_count():
    proxy = Proxy(list(IDS), dense_to_csr(DENSE))
    with pytest.raises(VLToolsError) as exc:
        proxy.rows(["a", "zz", "b", "yy"], "sims.h5", "queries")
    message = str(exc.value)
    assert message.startswith("sims.h5: 2 queries are not in the proxy file: 'zz', 'yy'")
    assert "tfidf-proxy" in message and "\n" not in message


def test_rows_name_only_the_first_five_unknown_ids():
    proxy = Proxy(list(IDS), dense_to_csr(DENSE))
    unknown = [f"x{i}" for i in range(7)]
    with pytest.raises(VLToolsError, match=r"7 database images are not in the proxy file: 'x0', 'x1', 'x2', 'x3', "
                                           r"'x4' and 2 more"):
        proxy.rows(unknown, "r.jsonl", "database images")
