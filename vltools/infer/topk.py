"""Top-k search: over a similarity matrix, or over separable embeddings (exact blocked matmul or FAISS).

Exact search keeps a running top-k while it walks the gallery in blocks, so neither the query x gallery
matrix nor the gallery itself has to be in memory at once. With `faiss` installed (an optional extra),
`index` can name any FAISS index factory string: "Flat" (exact inner product), "IVF1024,Flat",
"IVF4096,PQ64", ... (approximate; `nprobe` lists are visited per query).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch

from vltools.errors import VLToolsError, first_line
from vltools.infer.settings import EXACT

FACTORY_EXAMPLES = "Flat, IVF1024,Flat or IVF4096,PQ64"


def faiss_available() -> bool:
    """Whether the optional `faiss` package can be imported."""
    return importlib.util.find_spec("faiss") is not None


def topk_rows(sims: torch.Tensor, k: int, block_rows: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k scores and column indices of each row of `sims`, best first, `block_rows` rows at a time."""
    k = min(k, sims.shape[1])
    values = torch.empty(sims.shape[0], k, dtype=sims.dtype)
    indices = torch.empty(sims.shape[0], k, dtype=torch.long)
    for start in range(0, sims.shape[0], block_rows):
        values[start:start + block_rows], indices[start:start + block_rows] = sims[start:start + block_rows].topk(k)
    return values, indices


def merge_topk(best: tuple[torch.Tensor, torch.Tensor] | None, scores: torch.Tensor, offset: int,
               k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold a block of scores [Q, G_block] (gallery columns starting at `offset`) into a running top-k."""
    values, indices = scores.topk(min(k, scores.shape[1]), dim=1)
    indices = indices + offset
    if best is not None:
        values = torch.cat([best[0], values], dim=1)
        indices = torch.cat([best[1], indices], dim=1)
        values, order = values.topk(min(k, values.shape[1]), dim=1)
        indices = indices.gather(1, order)
    return values, indices


def blocks_of(array, block: int) -> Iterator[tuple[int, torch.Tensor]]:
    """(offset, float32 tensor) blocks of rows of an array-like (numpy array or h5py dataset)."""
    for start in range(0, len(array), block):
        yield start, torch.from_numpy(np.asarray(array[start:start + block], dtype=np.float32))


def exact_search(queries, gallery, k: int, batch_queries: int = 1024, batch_gallery: int = 65536,
                 device: torch.device | str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of every query row against the gallery rows (array-likes, read in blocks)."""
    device = torch.device(device)
    all_values, all_indices = [], []
    for _, query in blocks_of(queries, batch_queries):
        query = query.to(device)
        best = None
        for offset, items in blocks_of(gallery, batch_gallery):
            best = merge_topk(best, query @ items.to(device).T, offset, k)
        all_values.append(best[0].cpu())
        all_indices.append(best[1].cpu())
    return torch.cat(all_values).numpy(), torch.cat(all_indices).numpy()


def require_faiss(what: str, instead: str = "") -> object:
    """The `faiss` module, or the one-line error saying that `what` needs it, how to install it, and `instead`
    (what works without it)."""
    if not faiss_available():
        raise VLToolsError(f"{what} needs faiss, which is not installed; install the extra "
                           f"(pip install 'vltools[faiss]'){instead}")
    import faiss

    return faiss


def faiss_reason(exc: BaseException) -> str:
    """What a FAISS RuntimeError says, without the C++ location that precedes it."""
    return first_line(Exception(re.sub(r"^Error in .*? at \S+:\d+: (Error: )?", "", str(exc), flags=re.DOTALL)))


def faiss_index(dims: int, factory: str, metric: str = "ip", option: str = "--index") -> object:
    """An empty FAISS index of `dims` dimensions from the factory string `factory` (given by `option`), scoring
    by inner product ("ip") or L2 distance ("l2")."""
    faiss = require_faiss(f"{option} {factory!r}", " or use --index exact" if option == "--index" else "")
    try:
        return faiss.index_factory(dims, factory, faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise VLToolsError(f"{option} {factory!r} is not a FAISS index factory string ({faiss_reason(exc)}); "
                           f"try {FACTORY_EXAMPLES}") from None


def train_and_add(built: object, blocks: Iterable[np.ndarray], label: str, train: np.ndarray | None = None) -> None:
    """Train `built` on `train` (when it needs training; default: the first block) and add every block's rows;
    FAISS refusing either is one line naming `label` (the option and factory string that chose the index)."""
    for number, block in enumerate(blocks):
        block = np.ascontiguousarray(block, dtype=np.float32)
        if number == 0 and not built.is_trained:
            try:
                built.train(np.ascontiguousarray(block if train is None else train, dtype=np.float32))
            except RuntimeError as exc:
                raise VLToolsError(f"{label}: cannot train the index: {faiss_reason(exc)}; train on more rows "
                                   "(--train-size) or choose fewer IVF lists or PQ centroids") from None
        try:
            built.add(block)
        except RuntimeError as exc:
            raise VLToolsError(f"{label}: cannot add the embeddings to the index ({faiss_reason(exc)}); choose "
                               f"another factory string, e.g. {FACTORY_EXAMPLES}") from None


def faiss_query(built: object, queries, k: int, nprobe: int = 16, batch_queries: int = 65536,
                rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, row indices; -1 pads) of every query row in a FAISS index, `nprobe` IVF lists visited per
    query; scores are higher-is-better (an L2 index's squared distances are negated). `rows`: only these indexed
    rows are searched (a FAISS id selector; an index type without selectors raises FAISS's RuntimeError)."""
    import faiss

    ivf = faiss.try_extract_index_ivf(built)
    if ivf is not None:
        ivf.nprobe = nprobe
    params, selector = None, None
    if rows is not None:
        selector = faiss.IDSelectorBatch(np.ascontiguousarray(rows, dtype=np.int64))
        params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe) if ivf is not None else \
            faiss.SearchParameters(sel=selector)
    k = min(k, built.ntotal if rows is None else len(rows))
    values, indices = [], []
    for _, query in blocks_of(queries, batch_queries):
        found_values, found_indices = built.search(np.ascontiguousarray(query.numpy()), k, params=params)
        values.append(-found_values if built.metric_type == faiss.METRIC_L2 else found_values)
        indices.append(found_indices)
    return np.concatenate(values), np.concatenate(indices)


def faiss_search(queries, gallery, k: int, index: str, nprobe: int = 16,
                 batch_queries: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Inner-product top-k through a FAISS index built from the factory string `index` over the gallery."""
    vectors = np.asarray(gallery[:], dtype=np.float32)
    built = faiss_index(vectors.shape[1], index)
    train_and_add(built, [vectors], f"--index {index!r}")
    return faiss_query(built, queries, k, nprobe, batch_queries)


def search(queries, gallery, k: int, index: str = EXACT, nprobe: int = 16,
           device: torch.device | str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Top-k gallery rows by inner product for every query row: `index="exact"` or a FAISS factory string."""
    if len(gallery) == 0 or len(queries) == 0:
        raise VLToolsError("nothing to search: the query or the gallery set is empty")
    if index == EXACT:
        return exact_search(queries, gallery, k, device=device)
    return faiss_search(queries, gallery, k, index, nprobe)


def drop_self(query_ids: Sequence[str], gallery_ids: Sequence[str], values: np.ndarray, indices: np.ndarray,
              k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-(k + 1) lists without the query's own id (where the gallery holds it), cut to k; -1 pads short lists."""
    values, indices = np.asarray(values), np.asarray(indices)
    out_values = np.full((len(query_ids), k), -np.inf, dtype=values.dtype)
    out_indices = np.full((len(query_ids), k), -1, dtype=np.int64)
    for row, query in enumerate(query_ids):
        keep = [j for j in range(indices.shape[1]) if indices[row, j] >= 0 and gallery_ids[indices[row, j]] != query]
        keep = keep[:k]
        out_values[row, :len(keep)] = values[row, keep]
        out_indices[row, :len(keep)] = indices[row, keep]
    return out_values, out_indices
