"""vltools: composable command-line stages for vision-language research, and the same stages as Python functions
(see `vltools.api`), imported on first use so that the command line does not pay for torch before it needs it.

Functions (each checks every argument before any work; errors are one-line `vltools.errors.VLToolsError`):
    extract_regions(inputs, output, ...)  region features of images into a features HDF5 (`extract-regions`)
    match(first, second, model, ...)      rank captions for images and images for captions; returns `Matches`
    score_retrieval(scores, ...)          R@1/5/10 both ways, medr, meanr, rsum, mR of `Matches` or files
    caption(model, features, ...)         one {"image_id", "caption"} per image by beam search
    score_caption(predictions, refs, ...) BLEU, METEOR, ROUGE-L, CIDEr (SPICE) of captions files (`score caption`)
    score_semantic(model, proxy, ...)     NDCG@R, PCC@R, their AUC and user agreement of i2i similarities
    score_self_retrieval(logp, ks)        top-K recall of each generated caption's own image (`score self-retrieval`)
    encode(source, model, output, ...)    embeddings HDF5 of images or captions with a separable model (`encode`)
    train(model, inputs, output, ...)     train a model, keep the best checkpoint; config dict or --set keys
    convert(kind, source, output, ...)    every `vltools convert` kind: records, or the files written and counts
    report(out, rankings=..., ...)        the static HTML report folder of rankings, captions, scores (`report`)
    search(queries, index_file, ...)      the top-k rows of a saved index (`vltools index`) for each query
    load_model(name_or_path, role)        a checkpoint or store name as a `LoadedModel` (.model: the nn.Module)
    Matches                               what `match` returns: .sims, ids, top-k both ways, .rankings()

    import vltools
    found = vltools.match("feats.h5", "caps.jsonl", model="sgraf", top_k=10)
    vltools.score_retrieval(found)["rsum"]

help(vltools.match) and the others say more (help(vltools.api.train) and help(vltools.api.report) for the two
that are also subpackages); every stage is also `vltools STAGE --help` on the command line.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

__version__ = "0.1.0"

API = ("Matches", "caption", "convert", "encode", "extract_regions", "load_model", "match", "report",
       "score_caption", "score_retrieval", "score_self_retrieval", "score_semantic", "search", "train")
__all__ = ["__version__", *API]
CALLABLE_PACKAGES = ("report", "train")   # subpackages whose names are also API functions


class _CallablePackage(ModuleType):
    """A subpackage named like an API function: `vltools.train(...)` calls `vltools.api.train`, while
    `vltools.train.trainer` stays the package's module (the import system binds the package to the name, so a
    plain function of that name would be replaced by the package at the first `import vltools.train...`)."""

    def api_function(self) -> object:
        """The API function of this package's name (imports vltools.api, and so torch, on first use)."""
        return getattr(importlib.import_module("vltools.api"), self.__name__.rpartition(".")[2])

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.api_function()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.api_function())


for _package in CALLABLE_PACKAGES:
    importlib.import_module(f"vltools.{_package}").__class__ = _CallablePackage


def __getattr__(name: str) -> object:
    if name in API:
        return getattr(importlib.import_module("vltools.api"), name)
    raise AttributeError(f"module 'vltools' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API's names with the module's own, so that dir(vltools) and tab completion show the functions."""
    return sorted({*globals(), *API})
