"""Fisher vectors of sets of word vectors under a diagonal Gaussian mixture (Gordo & Larlus Table 1, "word2vec + FV").

The mixture (weights w_k, means mu_k, variances sigma_k^2 per dimension) is fitted by EM on weighted vectors (a
word's weight: how many times it is counted, so fitting the distinct words equals fitting every counted token), with
every variance floored at VARIANCE_FLOOR times the data's variance in that dimension. EM runs from `starts` starts,
each a weighted k-means++ seeding (Arthur & Vassilvitskii 2007: the first mean drawn in proportion to the weights,
each next one in proportion to weight x squared distance to the nearest mean already drawn) from one generator
seeded by `seed`, and the mixture of highest likelihood is kept. Equal vectors are merged and the vectors sorted
first, so the fit does not depend on the order in which they are given.

The "improved" Fisher vector of a set X = {x_1..x_N} (Perronnin, Sanchez & Mensink 2010), with gamma_t(k) the
posterior of component k for x_t:

    G_mu_k    = 1 / (N sqrt(w_k))   sum_t gamma_t(k) (x_t - mu_k) / sigma_k
    G_sigma_k = 1 / (N sqrt(2 w_k)) sum_t gamma_t(k) [(x_t - mu_k)^2 / sigma_k^2 - 1]

concatenated as [G_mu_1..G_mu_K, G_sigma_1..G_sigma_K] (2 K D values, columns named "mu:k:d" and "sigma:k:d"),
then the signed square root of each value, then l2 normalisation. An empty set gives the zero vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

VARIANCE_FLOOR = 1e-3
BLOCK_ROWS = 256


@dataclass(frozen=True)
class FisherSettings:
    """The mixture: 16 components by default (the paper does not say; the vector has 2 x 16 x 300 = 9600 values with
    300-d words, and an image's few dozen words give most components no weight beyond that), EM iterations per
    start, EM starts (the best likelihood kept), seed."""

    components: int = 16
    iterations: int = 100
    seed: int = 0
    starts: int = 5


@dataclass
class Gmm:
    """A diagonal Gaussian mixture: weights (K,), means (K, D), variances (K, D)."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray

    def log_joint(self, x: np.ndarray) -> np.ndarray:
        """log w_k + log N(x_t; mu_k, diag sigma_k^2), (N, K)."""
        precision = 1.0 / self.variances
        squared = (x ** 2) @ precision.T - 2 * x @ (self.means * precision).T + (self.means ** 2 * precision).sum(1)
        log_norm = -0.5 * (x.shape[1] * np.log(2 * np.pi) + np.log(self.variances).sum(axis=1))
        return np.log(self.weights) + log_norm - 0.5 * squared

    def posteriors(self, x: np.ndarray) -> np.ndarray:
        """gamma_t(k), (N, K), each row summing to 1."""
        return np.exp(normalise_log(self.log_joint(np.asarray(x, dtype=np.float64)))[0])

    def log_likelihood(self, x: np.ndarray, counts: np.ndarray) -> float:
        """The mean log-likelihood of the rows of `x` weighted by `counts` (what EM increases)."""
        counts = np.asarray(counts, dtype=np.float64)
        return float(counts @ normalise_log(self.log_joint(np.asarray(x, dtype=np.float64)))[1] / counts.sum())


def normalise_log(log_joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log posteriors, log likelihood of each row) of a row-wise log joint, stable (log-sum-exp)."""
    top = log_joint.max(axis=1, keepdims=True)
    log_total = top + np.log(np.exp(log_joint - top).sum(axis=1, keepdims=True))
    return log_joint - log_total, log_total[:, 0]


def merged_rows(x: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of `x` of nonzero total count, sorted, and their summed `counts`: the same whatever the
    order of the rows."""
    rows, inverse = np.unique(np.asarray(x, dtype=np.float64), axis=0, return_inverse=True)
    totals = np.bincount(inverse.ravel(), weights=np.asarray(counts, dtype=np.float64), minlength=len(rows))
    return rows[totals > 0], totals[totals > 0]


def kmeans_pp(x: np.ndarray, p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k rows of `x` chosen by weighted k-means++ (weights `p`, at least k distinct rows of nonzero weight): the
    first in proportion to p, each next in proportion to p x its squared distance to the nearest row chosen."""
    chosen = [int(rng.choice(len(x), p=p))]
    nearest = ((x - x[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(k - 1):
        mass = p * nearest
        chosen.append(int(rng.choice(len(x), p=mass / mass.sum())))
        nearest = np.minimum(nearest, ((x - x[chosen[-1]]) ** 2).sum(axis=1))
    return x[chosen].copy()


def em(x: np.ndarray, p: np.ndarray, means: np.ndarray, floor: np.ndarray, iterations: int, tol: float) -> Gmm:
    """EM of a diagonal mixture on the rows of `x` with shares `p`, from `means`, equal weights and the data's
    variance; variances floored at `floor`, stopped after `iterations` or when the likelihood gains less than
    `tol` of itself."""
    k = len(means)
    spread = np.maximum(p @ (x - p @ x) ** 2, floor)
    gmm = Gmm(np.full(k, 1.0 / k), means, np.tile(spread, (k, 1)))
    previous = -np.inf
    for _ in range(iterations):
        log_post, log_like = normalise_log(gmm.log_joint(x))
        resp = np.exp(log_post) * p[:, None]                # responsibilities weighted by the rows' shares
        mass = resp.sum(axis=0)
        alive = mass > 1e-12
        means, variances = gmm.means.copy(), gmm.variances.copy()
        means[alive] = (resp.T @ x)[alive] / mass[alive, None]
        variances[alive] = (resp.T @ x ** 2)[alive] / mass[alive, None] - means[alive] ** 2
        gmm = Gmm(np.maximum(mass, 1e-12) / np.maximum(mass, 1e-12).sum(), means, np.maximum(variances, floor))
        objective = float(p @ log_like)
        if objective - previous < tol * abs(objective):
            break
        previous = objective
    return gmm


def fit_gmm(x: np.ndarray, counts: np.ndarray, settings: FisherSettings, tol: float = 1e-7) -> Gmm:
    """EM of a diagonal mixture on the rows of `x` weighted by `counts`, from `settings.starts` k-means++ starts,
    the mixture of highest likelihood kept; the same whatever the order of the rows. Fewer distinct rows than
    components is a ValueError."""
    x, counts = merged_rows(x, counts)
    k = settings.components
    if settings.starts < 1:
        raise ValueError(f"EM needs at least one start, not {settings.starts}")
    if len(x) < k:
        raise ValueError(f"{len(x)} distinct word vectors cannot fit {k} mixture components")
    p = counts / counts.sum()
    floor = VARIANCE_FLOOR * np.maximum(p @ (x - p @ x) ** 2, np.finfo(np.float64).tiny)
    rng = np.random.default_rng(settings.seed)
    fits = [em(x, p, kmeans_pp(x, p, k, rng), floor, settings.iterations, tol) for _ in range(settings.starts)]
    likelihoods = [gmm.log_likelihood(x, counts) for gmm in fits]
    return fits[int(np.argmax(likelihoods))]


def word_terms(x: np.ndarray, gmm: Gmm) -> np.ndarray:
    """Each vector's summand of the Fisher vector before the 1/N: (N, 2 K D), the layout of `fisher_columns`."""
    x = np.asarray(x, dtype=np.float64)
    gamma = gmm.posteriors(x)[:, :, None]
    z = (x[:, None, :] - gmm.means[None]) / np.sqrt(gmm.variances)[None]
    mu = gamma * z / np.sqrt(gmm.weights)[None, :, None]
    sigma = gamma * (z ** 2 - 1) / np.sqrt(2 * gmm.weights)[None, :, None]
    return np.concatenate([mu.reshape(len(x), gmm.means.size), sigma.reshape(len(x), gmm.means.size)], axis=1)


def fisher_vectors(counts: sp.csr_matrix, vectors: np.ndarray, gmm: Gmm, block: int = BLOCK_ROWS) -> np.ndarray:
    """The improved Fisher vector of each row's multiset of words (`counts`: sets x words, `vectors`: words x D),
    (sets, 2 K D) float32, l2-normalised (empty sets: zero)."""
    counts = sp.csr_matrix(counts, dtype=np.float64)
    out = np.zeros((counts.shape[0], 2 * gmm.means.size), dtype=np.float32)
    for start in range(0, counts.shape[0], block):
        rows = counts[start:start + block]
        used = np.unique(rows.indices)
        summed = rows[:, used] @ word_terms(vectors[used], gmm)
        n = np.asarray(rows.sum(axis=1)).ravel()
        fv = np.sign(summed) * np.sqrt(np.abs(summed / np.maximum(n, 1)[:, None]))
        norms = np.linalg.norm(fv, axis=1)
        out[start:start + len(n)] = fv / np.where(norms > 0, norms, 1)[:, None]
    return out


def fisher_columns(components: int, dim: int) -> list[str]:
    """The names of the Fisher vector's values: "mu:k:d" for every component k and dimension d, then "sigma:k:d"."""
    return [f"{part}:{k}:{d}" for part in ("mu", "sigma") for k in range(components) for d in range(dim)]
