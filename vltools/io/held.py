"""What the Python API takes in memory where a stage reads a file, by kind (`held`), `Embeddings`, an embeddings
file in memory (what `vltools.encode` returns), and `FeaturesInMemory`, a features file's datasets in memory, which
its reader reads without a file. No numpy: the argument checks ask `held` (see `vltools.io.spooled` for the writing
of each kind to a temporary file of its kind, and for the making of `FeaturesInMemory`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

# the datasets of a features file (vltools.io.features), by which a dict in memory is told to be features
FIELDS = ("regions", "boxes", "num_regions", "image_size", "global", "featmap", "mask", "labels", "label_scores",
          "attributes", "attribute_scores")


@dataclass
class Embeddings:
    """Embeddings in memory: one row of `vectors` (a numpy array or tensor) per id of `ids` (a list of str, or a
    numpy array of them), the `side` they encode (images or captions), each caption's image (captions), and the
    file's attributes (`model`, `checkpoint_digest`, provenance), as the embeddings file holds them
    (`vltools.io.embeddings.read_embeddings`); given to the API, each is checked as its file would be (one
    usable id a row, none twice; attributes a file can hold) by `vltools.io.spooled`."""

    ids: list[str]
    vectors: object
    side: str
    caption_image_ids: list[str] | None = None
    attrs: dict[str, object] = field(default_factory=dict)

    def __repr__(self) -> str:
        """Side, shape and model, not the array: `Embeddings(captions, 21 x 64, vse)` (also of attributes that
        are no mapping, which an error message quoting them shows)."""
        shape = " x ".join(map(str, getattr(self.vectors, "shape", ("?",))))
        model = self.attrs.get("model", "no model") if isinstance(self.attrs, Mapping) else "no model"
        return f"Embeddings({self.side}, {shape}, {model})"


@dataclass
class FeaturesInMemory:
    """A features file's datasets held in memory as the file stores them (`vltools.io.spooled` makes them from the
    API's {"ids": [...], "regions": array, ...} with the writer's checks and casts): `FeaturesReader` reads them as it
    reads the file, with the same checks, without the file; `name` (the argument's: `first (in memory)`) is what
    its messages call them, as they call a file by its path."""

    name: str
    datasets: dict[str, object]     # "ids" (an object array of strings) and each dataset's array, one row per id
    attrs: dict[str, object]

    def __contains__(self, dataset: object) -> bool:
        return dataset in self.datasets

    def __getitem__(self, dataset: str) -> object:
        return self.datasets[dataset]

    def __str__(self) -> str:
        return self.name

    def close(self) -> None:
        """Nothing to close (the reader closes what it reads, a file or this)."""


def instance_of(value: object, module: str, name: str) -> bool:
    """Whether `value` is an instance of class `name` of `module` (a LoadedModel, a Matches), asked without importing
    the module, which may load torch: no instance exists before its module is imported. The API and the stages
    check their arguments so, before torch loads."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(value, getattr(loaded, name))


def in_memory(value: object) -> bool:
    """Whether `value` is records in memory: a list (or tuple) of dicts, or a dict (one JSON document, such as
    COCO annotations)."""
    return isinstance(value, dict) or (isinstance(value, list | tuple) and bool(value)
                                       and all(isinstance(item, dict) for item in value))


def held(value: object) -> str | None:
    """The kind of file `value` holds in memory: "embeddings" (an `Embeddings`), "features" (a mapping holding
    "ids" or arrays named as a features file's datasets: regions, global, boxes, ...; one without "ids" is features
    all the same, which the features check then says lack their ids), "records" (a list of dicts), "document" (any
    other dict), or None (a path, or anything else: left to the argument's check)."""
    if isinstance(value, Embeddings):
        return "embeddings"
    if isinstance(value, Mapping) and ("ids" in value or any(key in value for key in FIELDS)):
        return "features"
    if in_memory(value):
        return "document" if isinstance(value, dict) else "records"
    return None
