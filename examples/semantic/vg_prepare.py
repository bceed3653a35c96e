"""Prepare Visual Genome for the semantic retrieval recipe: the split rule, the images list and the objects records.

Usage: python vg_prepare.py DATA OUT [--val 10000] [--test 10000] [--seed 0]
Reads DATA/image_data.json (id, url, width, height) and DATA/objects.json (each image's objects and their synsets);
writes OUT/splits.json ({train, val, test: [image ids]}: images sorted by id, a seeded permutation gives --val to
val, --test to test and the rest to train, as the paper's 80k / 10k / 10k), OUT/images.jsonl (image_id, path
DATA/VG_100K*/<id>.jpg from the url, split) and OUT/objects.jsonl (one record per object synset: image_id,
caption = the synset, split) for `tfidf-proxy --method objects`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def image_key(entry: dict) -> str:
    return str(entry["image_id"] if "image_id" in entry else entry["id"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--val", type=int, default=10000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    images = json.loads((args.data / "image_data.json").read_text(encoding="utf-8"))
    ids = sorted((image_key(entry) for entry in images), key=lambda i: (len(i), i))
    order = np.random.default_rng(args.seed).permutation(len(ids))
    split_of = {}
    for rank, index in enumerate(order):
        split_of[ids[index]] = "val" if rank < args.val else "test" if rank < args.val + args.test else "train"
    splits = {name: [i for i in ids if split_of[i] == name] for name in ("train", "val", "test")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "splits.json").write_text(json.dumps(splits), encoding="utf-8")
    with open(args.out / "images.jsonl", "w", encoding="utf-8") as stream:
        for entry in images:
            key = image_key(entry)
            folder, name = entry["url"].rstrip("/").split("/")[-2:]
            path = os.path.abspath(args.data / folder / name)
            stream.write(json.dumps({"image_id": key, "path": path, "split": split_of[key]}) + "\n")
    with open(args.out / "objects.jsonl", "w", encoding="utf-8") as stream:
        for entry in json.loads((args.data / "objects.json").read_text(encoding="utf-8")):
            key = image_key(entry)
            for obj in entry.get("objects", []):
                for synset in obj.get("synsets", []):
                    stream.write(json.dumps({"image_id": key, "caption": synset, "split": split_of[key]}) + "\n")


if __name__ == "__main__":
    main()
