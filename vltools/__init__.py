"""vltools: composable command-line stages for vision-language research, and the same stages as Python functions
(see `vltools.api`), imported on first use so that the command line does not pay for torch before it needs it.

Functions (each checks every argument before any work; errors are one-line `vltools.errors.VLToolsError`; what
a stage reads from a file they also take in memory: records as lists of dicts, features as {"ids": [...],
"regions": array, ...}, `Embeddings`, `Matches`; what a stage writes they return, writing it when given a path):
    extract_regions(inputs, output, ...)  region features of images into a features HDF5 (`extract-regions`)
    match(first, second, model, ...)      rank captions for images and images for captions; returns `Matches`
    score_retrieval(scores, ...)          R@1/5/10 both ways, medr, meanr, rsum, mR of `Matches`, records or files
    caption(model, features, ...)         one {"image_id", "caption"} per image by beam search; output= writes them
    score_caption(predictions, refs, ...) BLEU, METEOR, ROUGE-L, CIDEr (SPICE) of captions (`score caption`)
    score_semantic(model, proxy, ...)     NDCG@R, PCC@R, their AUC and user agreement of i2i similarities
    score_self_retrieval(logp, ks)        top-K recall of each generated caption's own image (`score self-retrieval`)
    encode(source, model, output, ...)    `Embeddings` of images or captions with a separable model (`encode`)
    train(model, inputs, output, ...)     train a model, keep the best checkpoint; config dict or --set keys
    convert(kind, source, output, ...)    every `vltools convert` kind: records, or the files written and counts
    report(out, rankings=..., ...)        the static HTML report folder of rankings, captions, scores (`report`)
    search(queries, index_file, ...)      the top-k rows of a saved index (`vltools index`) for each query
    load_model(name_or_path, role)        a checkpoint or store name as a `LoadedModel` (.model: the nn.Module)
    Matches                               what `match` returns: .sims, ids, top-k both ways, .rankings()
    Embeddings                            what `encode` returns: .ids, .vectors (numpy), .side, .attrs

    import vltools
    found = vltools.match("feats.h5", "caps.jsonl", model="sgraf", top_k=10)
    vltools.score_retrieval(found)["rsum"]

help(vltools.match) and the others say more; every stage is also `vltools STAGE --help` on the command line.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

API = ("Embeddings", "Matches", "caption", "convert", "encode", "extract_regions", "load_model", "match", "report",
       "score_caption", "score_retrieval", "score_self_retrieval", "score_semantic", "search", "train")
__all__ = ["__version__", *API]


def __getattr__(name: str) -> object:
    if name in API:
        return getattr(importlib.import_module("vltools.api"), name)
    raise AttributeError(f"module 'vltools' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API's names and the module's dunders, so that dir(vltools) and tab completion show the functions and
    nothing this module merely imports."""
    return sorted({*(name for name in globals() if name.startswith("__")), *API})
