"""Benchmark of a saved index (`vltools index` + `match --index-file`): exact (Flat) against IVF-PQ over synthetic
embeddings, in one run: build time (sampling, training, adding, serializing and writing the file), index file size,
queries per second, and recall@10 of IVF-PQ against the exact top 10.

The embeddings are made here: n gallery rows and q query rows of d dimensions (float32) with the low intrinsic
dimension of learned embeddings: a Gaussian latent vector of LATENT = 64 dimensions through one fixed random LATENT
x d map, plus Gaussian noise of 0.1 / sqrt(d) per coordinate, renormalised to unit length (what `encode` writes), so
that nearest neighbours are well defined (isotropic noise around cluster centres in 1024 dimensions makes every
member of a cluster about equally near, and recall then measures the noise); they are written as image and caption
embeddings files by `vltools.io.embeddings`, then indexed and searched through the library the stages call
(`vltools.infer.index`, `vltools.infer.match`). Prints readable lines, then one JSON object on the last line. The
full size needs about 4 GB for the vectors on disk, about 8 GB of memory for the Flat index while it is serialized,
and a machine to itself.

    python benchmarks/index.py [--n 1000000] [--dims 1024] [--queries 1000] [--factory IVF4096,PQ64]
                               [--train-size 262144] [--nprobe 16] [--k 10] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from machine import cpu_model

from vltools.infer.index import build_index
from vltools.infer.match import Search, match_index
from vltools.io.embeddings import write_embeddings

BLOCK = 65536
LATENT = 64


def latent_blocks(n: int, mixing: np.ndarray, seed: int):
    """Unit rows of a LATENT-dimensional Gaussian mapped by `mixing`, plus noise, BLOCK at a time (the gallery is
    never in memory twice)."""
    rng = np.random.default_rng(seed)
    dims = mixing.shape[1]
    for start in range(0, n, BLOCK):
        size = min(BLOCK, n - start)
        rows = rng.normal(size=(size, LATENT)) @ mixing + rng.normal(size=(size, dims)) * 0.1 / np.sqrt(dims)
        yield (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def write_data(folder: Path, n: int, queries: int, dims: int) -> None:
    mixing = np.random.default_rng(0).normal(size=(LATENT, dims)) / np.sqrt(LATENT * dims)
    attrs = {"model": "synthetic", "checkpoint_digest": "synthetic"}
    write_embeddings(folder / "gallery.h5", [f"i{k}" for k in range(n)], latent_blocks(n, mixing, 1),
                     {**attrs, "side": "images"})
    write_embeddings(folder / "queries.h5", [f"c{k}" for k in range(queries)], latent_blocks(queries, mixing, 2),
                     {**attrs, "side": "captions"}, caption_image_ids=[f"i{k}" for k in range(queries)])


def measure(folder: Path, factory: str, train_size: int, nprobe: int, k: int) -> tuple[dict, np.ndarray]:
    """Build the index `factory`, then search it with every query; the figures and the top-k row indices."""
    path = folder / f"{factory.replace(',', '_')}.index.h5"
    start = time.perf_counter()
    build_index(folder / "gallery.h5", path, factory, "ip", train_size, seed=0)
    built = time.perf_counter() - start
    start = time.perf_counter()
    found = match_index(folder / "queries.h5", path, Search(top_k=k, nprobe=nprobe))
    searched = time.perf_counter() - start
    figures = {"factory": factory, "build_s": round(built, 2), "index_mb": round(path.stat().st_size / 2**20, 1),
               "search_s": round(searched, 3), "queries_per_s": round(len(found.row_ids) / searched, 1)}
    path.unlink()
    return figures, found.forward[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="gallery rows")
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--factory", default="IVF4096,PQ64", help="the approximate index against Flat")
    parser.add_argument("--train-size", type=int, default=262144)
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--folder", help="where the embeddings and indexes are written [a temporary folder]")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, FAISS threads {faiss.omp_get_max_threads()}, "
          f"faiss {faiss.__version__}; load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=args.folder) as name:
        folder = Path(name)
        start = time.perf_counter()
        write_data(folder, args.n, args.queries, args.dims)
        print(f"wrote {args.n} x {args.dims} gallery and {args.queries} queries in {time.perf_counter() - start:.1f} s")
        exact, exact_rows = measure(folder, "Flat", args.train_size, args.nprobe, args.k)
        approximate, rows = measure(folder, args.factory, args.train_size, args.nprobe, args.k)
    approximate["recall_at_k"] = round(float(np.mean([len(set(a) & set(b)) / args.k
                                                      for a, b in zip(exact_rows, rows, strict=True)])), 4)
    approximate["nprobe"] = args.nprobe
    for figures in (exact, approximate):
        print(json.dumps(figures))
    load = os.getloadavg()
    print(f"load average after: {load}")
    print(json.dumps({"n": args.n, "dims": args.dims, "queries": args.queries, "k": args.k, "cpu": cpu_model(),
                      "threads": faiss.omp_get_max_threads(), "load_after": load, "exact": exact,
                      "approximate": approximate}))


if __name__ == "__main__":
    main()
