"""Fisher vectors of sets of word vectors under a diagonal Gaussian mixture (Gordo & Larlus Table 1, "word2vec + FV").

The mixture (weights w_k, means mu_k, variances sigma_k^2 per dimension) is fitted by EM on weighted vectors (a
word's weight: its number of occurrences, so fitting the distinct words equals fitting every token), started from
`components` vectors drawn with a seed in proportion to their weights, with every variance floored at VARIANCE_FLOOR
times the data's variance in that dimension. The "improved" Fisher vector of a set X = {x_1..x_N}
(Perronnin, Sanchez & Mensink 2010), with gamma_t(k) the posterior of component k for x_t:

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
    300-d words, and an image's few dozen words give most components no weight beyond that), EM iterations, seed."""

    components: int = 16
    iterations: int = 100
    seed: int = 0


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


def normalise_log(log_joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log posteriors, log likelihood of each row) of a row-wise log joint, stable (log-sum-exp)."""
    top = log_joint.max(axis=1, keepdims=True)
    log_total = top + np.log(np.exp(log_joint - top).sum(axis=1, keepdims=True))
    return log_joint - log_total, log_total[:, 0]


def fit_gmm(x: np.ndarray, counts: np.ndarray, settings: FisherSettings, tol: float = 1e-7) -> Gmm:
    """EM of a diagonal mixture on the rows of `x` weighted by `counts`; fewer distinct rows than components is a
    ValueError."""
    x = np.asarray(x, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    k = settings.components
    distinct = len(np.unique(x[counts > 0], axis=0))
    if distinct < k:
        raise ValueError(f"{distinct} distinct word vectors cannot fit {k} mixture components")
    p = counts / counts.sum()
    mean = p @ x
    floor = VARIANCE_FLOOR * np.maximum(p @ (x - mean) ** 2, np.finfo(np.float64).tiny)
    rng = np.random.default_rng(settings.seed)
    start = rng.choice(len(x), size=k, replace=False, p=p)       # k rows of nonzero weight: there are >= k
    gmm = Gmm(np.full(k, 1.0 / k), x[start].copy(), np.tile(np.maximum(p @ (x - mean) ** 2, floor), (k, 1)))
    previous = -np.inf
    for _ in range(settings.iterations):
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
