"""Benchmark of `tfidf-proxy` on a Visual Genome-sized corpus against scikit-learn's TfidfVectorizer + brute force.

The corpus is generated here: n images x 50 region captions of 3-8 words drawn from a Zipf distribution (exponent
1.0) over pseudo-words (about 47k stems once stemmed: base words plus -s / -ing / -ed forms), split 80 / 10 / 10
(train / val / test, as the paper's 80k / 10k / 10k). Both routes get the same texts (an image's captions joined)
and compute, for every image, its k = 32 nearest images by tf-idf cosine within its split:
  - vltools: `vltools.data.semantic.build_proxy` (Snowball stems, tf-idf fitted on train, dense + sparse products);
  - scikit-learn: TfidfVectorizer (the same stemming tokenizer, idf fitted on train, binary tf: each image's stems
    counted once, as vltools' default) + NearestNeighbors(brute, cosine) per split.
Each size runs in a fresh process per route, so that the peak resident memory (ru_maxrss) is that route's alone.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/tfidf_proxy.py [--sizes 10000,30000,108000] [--captions 50] [--k 32] [--skip-sklearn-above N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
from machine import cpu_model

BASE_WORDS = 36000
SUFFIXES = ("", "s", "ing", "ed")
SUFFIX_P = (0.7, 0.15, 0.1, 0.05)


def corpus(n_images: int, captions: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(texts, splits): each image's captions joined, and its split."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    bases = ["".join(letters[rng.integers(0, 26, rng.integers(4, 9))]) for _ in range(BASE_WORDS)]
    ranks = np.arange(1, BASE_WORDS + 1)
    weights = 1.0 / ranks
    weights /= weights.sum()
    lengths = rng.integers(3, 9, size=(n_images, captions))
    texts = []
    for i in range(n_images):
        total = int(lengths[i].sum())
        words = rng.choice(BASE_WORDS, size=total, p=weights)
        suffix = rng.choice(len(SUFFIXES), size=total, p=SUFFIX_P)
        tokens = [bases[w] + SUFFIXES[s] for w, s in zip(words, suffix, strict=True)]
        bounds = np.cumsum(lengths[i])[:-1]
        texts.append(". ".join(" ".join(part) for part in np.split(np.array(tokens, dtype=object), bounds)))
    splits = rng.choice(["train", "val", "test"], size=n_images, p=(0.8, 0.1, 0.1)).tolist()
    return texts, splits


def run_vltools(texts: list[str], splits: list[str], k: int) -> dict:
    from vltools.data.semantic import build_proxy

    proxy = build_proxy([str(i) for i in range(len(texts))], splits, [[t] for t in texts], "train", k)
    return {"stems": len(proxy.vocab), "checksum": float(np.nansum(proxy.neighbor_sims[:, 0]))}


def run_sklearn(texts: list[str], splits: list[str], k: int) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.neighbors import NearestNeighbors

    from vltools.text.tfidf import Stemmer

    split_array = np.array(splits)
    vectorizer = TfidfVectorizer(tokenizer=Stemmer(), lowercase=False, token_pattern=None, smooth_idf=False,
                                 sublinear_tf=False, binary=True)
    vectorizer.fit([t for t, s in zip(texts, splits, strict=True) if s == "train"])
    matrix = vectorizer.transform(texts)
    total = 0.0
    for split in ("train", "val", "test"):
        rows = np.flatnonzero(split_array == split)
        search = NearestNeighbors(n_neighbors=min(k + 1, len(rows)), metric="cosine", algorithm="brute")
        search.fit(matrix[rows])
        distances, _ = search.kneighbors(matrix[rows])
        total += float((1 - distances[:, 1]).sum())
    return {"stems": len(vectorizer.vocabulary_), "checksum": total}


def child(route: str, size: int, captions: int, k: int) -> None:
    """One measurement in this process: generate, then time the route; print one JSON line."""
    texts, splits = corpus(size, captions)
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    result = (run_vltools if route == "vltools" else run_sklearn)(texts, splits, k)
    result.update(route=route, images=size, wall_s=time.perf_counter() - start_wall,
                  cpu_s=time.process_time() - start_cpu,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result))


def measure(route: str, size: int, captions: int, k: int) -> dict:
    output = subprocess.run([sys.executable, __file__, "--child", route, "--sizes", str(size), "--captions",
                             str(captions), "--k", str(k)], capture_output=True, text=True, check=True)
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,30000,108000")
    parser.add_argument("--captions", type=int, default=50)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--skip-sklearn-above", type=int, default=10**9,
                        help="Run the scikit-learn route only up to this many images.")
    parser.add_argument("--child", choices=("vltools", "sklearn"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        child(args.child, sizes[0], args.captions, args.k)
        return
    try:
        import sklearn  # noqa: F401

        have_sklearn = True
    except ImportError:
        have_sklearn = False
        print("scikit-learn is not installed: the baseline route is skipped (pip install scikit-learn)")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
          f", {args.captions} captions per image, k={args.k}")
    figures = []
    for size in sizes:
        row = {"images": size, "vltools": measure("vltools", size, args.captions, args.k)}
        if have_sklearn and size <= args.skip_sklearn_above:
            row["sklearn"] = measure("sklearn", size, args.captions, args.k)
            row["speedup"] = row["sklearn"]["wall_s"] / row["vltools"]["wall_s"]
            row["cpu_speedup"] = row["sklearn"]["cpu_s"] / row["vltools"]["cpu_s"]
        figures.append(row)
        line = (f"{size:>7} images: vltools {row['vltools']['wall_s']:.1f} s wall, {row['vltools']['cpu_s']:.1f} s "
                f"CPU, {row['vltools']['peak_rss_mb']:.0f} MB peak, {row['vltools']['stems']} stems")
        if "sklearn" in row:
            line += (f"; scikit-learn {row['sklearn']['wall_s']:.1f} s wall, {row['sklearn']['cpu_s']:.1f} s CPU, "
                     f"{row['sklearn']['peak_rss_mb']:.0f} MB peak; speedup {row['speedup']:.2f}x wall, "
                     f"{row['cpu_speedup']:.2f}x CPU")
        print(line, flush=True)
    print(json.dumps({"cpu": cpu_model(), "cores": os.cpu_count(), "figures": figures}))


if __name__ == "__main__":
    main()
