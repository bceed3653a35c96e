"""vltools.text.sparse: the proxy's tf-idf dot products against dense matrix products."""

import numpy as np
import pytest
from test_io_proxy import DENSE, dense_to_csr, hand_proxy

from vltools.io.proxy import read_proxy, write_proxy
from vltools.text.sparse import csr_dot, relevance


def test_csr_dot_by_hand():
    a = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    b = np.array([[0.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    # row 0: (0 + 0 + 2, 4); row 1: empty; row 2: (3, 0)
    np.testing.assert_array_equal(csr_dot(dense_to_csr(a), dense_to_csr(b)), [[2.0, 4.0], [0.0, 0.0], [3.0, 0.0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_csr_dot_equals_the_dense_matrix_product(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(9, 25)) * (rng.random((9, 25)) < 0.3)
    b = rng.normal(size=(13, 25)) * (rng.random((13, 25)) < 0.3)
    a[4] = 0                                   # an empty query row
    b[:, 7] = 0                                # a column no database row uses
    b[2] = 0                                   # an empty database row
    out = csr_dot(dense_to_csr(a), dense_to_csr(b))
    assert out.shape == (9, 13)
    np.testing.assert_allclose(out, a @ b.T, atol=1e-12)


def test_csr_dot_refuses_different_column_counts():
    with pytest.raises(ValueError, match="column counts differ: 3 vs 4"):
        csr_dot(dense_to_csr(np.eye(3)), dense_to_csr(np.eye(4)))


def test_relevance_of_a_proxys_rows_by_hand(tmp_path):
    path = tmp_path / "proxy.h5"
    write_proxy(path, hand_proxy(), {})
    proxy = read_proxy(path)
    rows = proxy.rows(["d", "a", "d"], "sims.h5", "queries")
    relevant = relevance(proxy, rows, proxy.rows(["a", "b", "c", "d"], "sims.h5", "database images"))
    np.testing.assert_allclose(relevant, DENSE[[3, 0, 3]].astype(np.float64) @ DENSE.T.astype(np.float64),
                               atol=1e-7)
    np.testing.assert_allclose(relevant[0], [0.48, 0.6, 0.0, 1.0], atol=1e-6)    # by hand
