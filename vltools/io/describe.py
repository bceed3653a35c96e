"""Validate any vltools file and describe it: kind, counts, shapes, provenance (for `inspect`)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from vltools.errors import VLToolsError, require_file
from vltools.io.checkpoints import checkpoint_field, load_checkpoint
from vltools.io.embeddings import open_embeddings
from vltools.io.features import FeaturesReader
from vltools.io.fields import TEXT, optional
from vltools.io.hdf5 import attributes, decode_strings, file_kind, is_hdf5, open_h5, verify
from vltools.io.jsonl import iter_json_lines
from vltools.io.part_sets import PLACE_ATTRS
from vltools.io.records import SCHEMAS, caption_ids, detect_kind, read_records
from vltools.io.shards import is_part_set, part_files
from vltools.io.sims import read_sims

REQUIRED_DATASETS = {
    "proxy": ("ids", "tfidf/data", "tfidf/indices", "tfidf/indptr", "vocab", "idf"),
    "sims": ("sims", "image_ids", "caption_ids"),
    "embeddings": ("ids", "emb"),
    "logp": ("logp", "image_ids"),
    "index": ("ids", "index"),
}


def describe_hdf5(path: Path) -> dict:
    """Check an HDF5 file of any vltools kind and summarise its datasets and attributes."""
    with open_h5(path) as handle:
        kind = file_kind(handle)
        if kind is None:
            raise VLToolsError(f"{path}: HDF5 but not a vltools file (no 'format' attribute)")
        attrs = attributes(handle)
        shapes = {}
        handle.visititems(lambda name, obj: shapes.__setitem__(name, list(obj.shape)) if hasattr(obj, "shape")
                          else None)
        for name in REQUIRED_DATASETS.get(kind, ()):
            if name not in handle:
                raise VLToolsError(f"{path}: {kind} file lacks the /{name} dataset")
        verify(handle, finite=("regions", "global", "featmap", "mask", "boxes", "emb", "sims", "tfidf/data", "idf"))
        count = len(handle["ids"]) if "ids" in handle else None
        if kind in ("sims", "logp"):
            count = len(decode_strings(handle["image_ids"][:]))
    if kind == "features":
        with FeaturesReader(path) as reader:
            count = len(reader)
    return {"kind": kind, "count": count, "shapes": shapes, "attributes": attrs}


def describe_checkpoint(path: Path) -> dict:
    """Load a checkpoint safely and summarise its model, config and parameters."""
    payload = load_checkpoint(path)
    state = payload["state_dict"]
    return {
        "kind": "checkpoint",
        "model": payload.get("model"),
        "config": payload.get("config"),
        "vocab_size": len(payload["vocab"]) if payload.get("vocab") else None,
        "parameters": int(sum(t.numel() for t in state.values())),
        "tensors": len(state),
        "train_state": {k: v for k, v in payload.get("train_state", {}).items() if isinstance(v, (int, float, str))},
        "tokenizer": checkpoint_field(payload, "train_state.inputs.tokenizer", optional(TEXT), path, None),  # vocab
        "provenance": payload.get("provenance"),
    }


def describe_jsonl(path: Path) -> dict:
    """Validate a JSONL file as the kind its first record shows and count its records."""
    first = None
    for number, first in iter_json_lines(path, "fix or remove that line"):
        kind = detect_kind(first) if isinstance(first, dict) else None
        if kind is None:
            raise VLToolsError(f"{path}: line {number}: not a record of any vltools JSONL kind "
                               f"({', '.join(SCHEMAS)})")
        break
    else:
        raise VLToolsError(f"{path}: empty file: no records")
    records = read_records(path, kind)
    if kind == "captions":
        caption_ids(records, path)
    summary: dict[str, object] = {"kind": kind, "count": len(records)}
    id_field = {"captions": "image_id", "regions": "image_id", "pairs": "pair_id", "rankings": "query",
                "images": "image_id", "votes": "query", "triplets": "query"}[kind]
    summary[f"distinct_{id_field}"] = len({r[id_field] for r in records})
    splits = {}
    for record in records:
        if "split" in record:
            splits[record["split"]] = splits.get(record["split"], 0) + 1
    if splits:
        summary["splits"] = dict(sorted(splits.items()))
    return summary


def describe_parts(folder: Path) -> dict:
    """Check the set of parts in `folder` (vltools.io.shards) as every reader takes it, each part as a file, and
    summarise it as one file, with the number of its parts."""
    files = part_files(folder)
    if files[0].suffix == ".jsonl":
        return {**describe_jsonl(folder), "parts": len(files)}
    described = [describe_hdf5(file) for file in files]
    kind = described[0]["kind"]
    if kind == "features":
        FeaturesReader(folder).close()
    elif kind == "embeddings":
        open_embeddings(folder).close()
    elif kind == "sims":
        read_sims(folder)
    else:
        raise VLToolsError(f"{folder}: holds parts of {kind} files, which no stage writes in parts")
    shapes = {name: [sum(item["shapes"].get(name, [0])[0] for item in described), *shape[1:]]
              for name, shape in described[0]["shapes"].items()}
    attrs = {key: value for key, value in described[0]["attributes"].items()
             if key not in (*PLACE_ATTRS, "ids_checksum", "ids_digest", "caption_image_ids_digest", "failed_digest")}
    if "num_failed" in attrs:
        attrs["num_failed"] = sum(int(item["attributes"].get("num_failed", 0)) for item in described)
    return {"kind": kind, "count": sum(item["count"] or 0 for item in described), "parts": len(files),
            "shapes": shapes, "attributes": attrs}


def describe(path: str | os.PathLike) -> dict:
    """Dispatch on the file's content: HDF5 signature, zip (torch checkpoint), else JSONL; a folder of parts is
    described as one file."""
    if str(path) == "-":
        raise VLToolsError("inspect reads files, not standard input (-); save the data to a file and give its path")
    if is_part_set(path):
        return {"path": str(path), **describe_parts(Path(path))}
    path = require_file(path)
    if path.stat().st_size == 0:
        raise VLToolsError(f"{path}: empty file")
    if is_hdf5(path):
        result = describe_hdf5(path)
    elif zipfile.is_zipfile(path) or path.suffix in (".pt", ".pth", ".tar"):
        result = describe_checkpoint(path)
    else:
        result = describe_jsonl(path)
    return {"path": str(path), **result}
