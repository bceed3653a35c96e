"""Fisher vectors: a tiny case computed by hand with the formulas written out; EM on two separated clusters, from
k-means++ starts, the same whatever the rows' order, the best of several starts kept."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from vltools.text.fisher import FisherSettings, Gmm, fisher_columns, fisher_vectors, fit_gmm, kmeans_pp, merged_rows

# four words in 2-d; an image whose three captions are "a b", "b c d" and "a a c" is the set of their 8 words
VECTORS = {"a": (0.0, 0.0), "b": (1.0, 2.0), "c": (3.0, 1.0), "d": (-1.0, 1.0)}
SENTENCES = ["a b", "b c d", "a a c"]
WEIGHTS = (0.3, 0.7)
MEANS = ((0.0, 1.0), (2.0, 1.5))
VARIANCES = ((1.0, 0.5), (2.0, 1.0))


def hand_fisher_vector(words: list[str]) -> list[float]:
    """The improved Fisher vector, one word and one component at a time, from the formulas."""
    def density(x, k):
        value = 1.0
        for d in range(2):
            value *= math.exp(-(x[d] - MEANS[k][d]) ** 2 / (2 * VARIANCES[k][d])) / math.sqrt(2 * math.pi
                                                                                              * VARIANCES[k][d])
        return value

    n = len(words)
    g_mu = [[0.0, 0.0], [0.0, 0.0]]
    g_sigma = [[0.0, 0.0], [0.0, 0.0]]
    for word in words:
        x = VECTORS[word]
        joint = [WEIGHTS[k] * density(x, k) for k in range(2)]
        for k in range(2):
            gamma = joint[k] / sum(joint)
            for d in range(2):
                sigma = math.sqrt(VARIANCES[k][d])
                g_mu[k][d] += gamma * (x[d] - MEANS[k][d]) / sigma / (n * math.sqrt(WEIGHTS[k]))
                g_sigma[k][d] += gamma * ((x[d] - MEANS[k][d]) ** 2 / sigma ** 2 - 1) / (n * math.sqrt(2 * WEIGHTS[k]))
    raw = [g_mu[0][0], g_mu[0][1], g_mu[1][0], g_mu[1][1], g_sigma[0][0], g_sigma[0][1], g_sigma[1][0], g_sigma[1][1]]
    rooted = [math.copysign(math.sqrt(abs(v)), v) for v in raw]
    norm = math.sqrt(sum(v * v for v in rooted))
    return [v / norm for v in rooted]


def test_fisher_vector_of_three_sentences_matches_the_formulas():
    words = [w for sentence in SENTENCES for w in sentence.split()]
    order = list(VECTORS)
    counts = sp.csr_matrix(np.array([[words.count(w) for w in order],     # the three sentences' words
                                     [0, 0, 0, 2],                        # "d d"
                                     [0, 0, 0, 0]]))                      # no word: zero vector
    gmm = Gmm(np.array(WEIGHTS), np.array(MEANS), np.array(VARIANCES))
    fv = fisher_vectors(counts, np.array([VECTORS[w] for w in order]), gmm, block=2)   # two blocks
    assert fv.shape == (3, 8) and fv.dtype == np.float32
    np.testing.assert_allclose(fv[0], hand_fisher_vector(words), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fv[1], hand_fisher_vector(["d", "d"]), rtol=1e-5, atol=1e-6)
    assert not fv[2].any()
    assert fisher_columns(2, 2) == ["mu:0:0", "mu:0:1", "mu:1:0", "mu:1:1",
                                    "sigma:0:0", "sigma:0:1", "sigma:1:0", "sigma:1:1"]


def test_em_recovers_two_separated_components():
    rng = np.random.default_rng(0)
    first = rng.normal((0.0, 0.0), (0.5, 0.5), size=(600, 2))
    second = rng.normal((10.0, 5.0), (1.0, 0.25), size=(400, 2))
    gmm = fit_gmm(np.concatenate([first, second]), np.ones(1000), FisherSettings(components=2, seed=3))
    order = np.argsort(gmm.means[:, 0])
    np.testing.assert_allclose(gmm.weights[order], [0.6, 0.4], atol=1e-6)
    np.testing.assert_allclose(gmm.means[order], [[0.0, 0.0], [10.0, 5.0]], atol=0.1)
    # each cluster's own maximum-likelihood estimates (the clusters are ~10 standard deviations apart)
    np.testing.assert_allclose(gmm.means[order], [first.mean(0), second.mean(0)], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gmm.variances[order], [first.var(0), second.var(0)], rtol=1e-4)


def test_counts_weigh_rows_as_repeated_occurrences():
    """Three words seen 1, 1 and 8 times: a single component's mean is the occurrence-weighted mean."""
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    gmm = fit_gmm(x, np.array([1, 1, 8]), FisherSettings(components=1))
    np.testing.assert_allclose(gmm.means[0], [0.1, 0.8])
    np.testing.assert_allclose(gmm.variances[0], [0.1 - 0.01, 0.8 - 0.64])
    # its mean log-likelihood, a Gaussian's density written out
    var = np.array([0.09, 0.16])
    logs = [-0.5 * (2 * math.log(2 * math.pi) + np.log(var).sum() + (((row - [0.1, 0.8]) ** 2) / var).sum())
            for row in x]
    assert gmm.log_likelihood(x, np.array([1, 1, 8])) == pytest.approx((logs[0] + logs[1] + 8 * logs[2]) / 10)


def test_the_mixture_does_not_depend_on_the_rows_order():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(c, 1.0, size=(30, 3)) for c in rng.normal(0, 3, size=(5, 3))])
    counts = rng.integers(1, 6, size=len(x)).astype(float)
    settings = FisherSettings(components=5, seed=2)
    first = fit_gmm(x, counts, settings)
    for order in (np.arange(len(x))[::-1], rng.permutation(len(x))):
        again = fit_gmm(x[order], counts[order], settings)
        for got, expected in ((again.weights, first.weights), (again.means, first.means),
                              (again.variances, first.variances)):
            np.testing.assert_array_equal(got, expected)
    # equal rows are one row of their summed count, wherever they stand
    merged, totals = merged_rows(np.array([[2.0, 0.0], [1.0, 5.0], [2.0, 0.0], [0.0, 1.0]]), np.array([1, 2, 3, 0]))
    assert merged.tolist() == [[1.0, 5.0], [2.0, 0.0]] and totals.tolist() == [2.0, 4.0]


def test_kmeans_plus_plus_draws_far_rows_in_proportion_to_weight_times_squared_distance():
    # the second start can only be the far row: the near rows coincide with the first, which has 99% of the weight
    x = np.array([[0.0, 0.0], [0.0, 0.0], [100.0, 0.0]])
    p = np.array([0.5, 0.49, 0.01])
    for seed in range(20):
        starts = kmeans_pp(x, p, 2, np.random.default_rng(seed))
        assert sorted(starts[:, 0].tolist()) == [0.0, 100.0]
    # with p alone the far row would be the first start about once in a hundred draws, never in these twenty
    firsts = {kmeans_pp(x, p, 1, np.random.default_rng(seed))[0, 0] for seed in range(20)}
    assert firsts == {0.0}


def test_more_starts_never_lose_likelihood_and_can_gain_it():
    """The starts are drawn one after the other from one generator: n + 1 starts try the n first ones and one more,
    and the best is kept, so the likelihood cannot fall as starts are added."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(c, 1.0, size=(40, 2)) for c in rng.normal(0, 3, size=(8, 2))])
    counts = np.ones(len(x))
    likelihoods = [fit_gmm(x, counts, FisherSettings(components=8, starts=n)).log_likelihood(x, counts)
                   for n in (1, 2, 4, 8)]
    assert likelihoods == sorted(likelihoods)
    assert likelihoods[-1] > likelihoods[0] + 0.01       # the first start alone stops in a worse local optimum
    assert FisherSettings().starts > 1
    with pytest.raises(ValueError, match="at least one start"):
        fit_gmm(x, counts, FisherSettings(components=8, starts=0))


def test_collapsed_components_keep_the_variance_floor():
    x = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 2.0]])
    gmm = fit_gmm(x, np.array([5, 3, 2]), FisherSettings(components=3))
    global_variance = np.array([0.5 * 0 + 0.3 * 16 + 0.2 * 0 - 1.2 ** 2, 0.2 * 4 - 0.4 ** 2])
    assert np.isfinite(gmm.variances).all()
    np.testing.assert_allclose(gmm.variances, np.tile(1e-3 * global_variance, (3, 1)), rtol=1e-6)


def test_fewer_distinct_vectors_than_components():
    with pytest.raises(ValueError, match="2 distinct word vectors cannot fit 3"):
        fit_gmm(np.array([[0.0, 1.0], [0.0, 1.0], [2.0, 2.0]]), np.ones(3), FisherSettings(components=3))
