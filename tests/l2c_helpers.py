"""A tiny L2C world for unit tests: random feature maps and masks in a segment-pool layout, pairs, captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vltools.io.features import FeaturesWriter

DIM, SIZE = 8, 3
WORDS = ("red", "blue", "green", "circle", "square", "bigger", "smaller")


def write_maps(path: Path, ids: list[str], seed: int = 0, mask_size: int = SIZE, fields=("featmap", "mask"),
               empty: tuple[str, ...] = ()) -> Path:
    """A features file with /featmap (N, DIM, SIZE, SIZE) and /mask (N, mask_size, mask_size)."""
    rng = np.random.default_rng(seed)
    arrays = {"featmap": rng.standard_normal((len(ids), DIM, SIZE, SIZE)).astype(np.float32),
              "mask": rng.uniform(0.2, 1.0, (len(ids), mask_size, mask_size)).astype(np.float32)}
    for image_id in empty:
        arrays["mask"][ids.index(image_id)] = 0
    with FeaturesWriter(path, {"stage": "segment-pool"}, dtype="float32") as writer:
        writer.add(ids, **{k: v for k, v in arrays.items() if k in fields})
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def make_world(folder: Path, pairs: int = 12, images: int = 10) -> dict[str, Path]:
    """pairs.jsonl (2 descriptions a pair; splits train/val), pairs.h5, captions.jsonl, aux.h5."""
    rng = np.random.default_rng(1)
    records = []
    for n in range(pairs):
        split = "val" if n % 4 == 3 else "train"
        for k in range(2):
            words = " ".join(rng.choice(WORDS, size=4))
            records.append({"pair_id": f"p{n}", "image_a": f"p{n}a", "image_b": f"p{n}b",
                            "description": f"the left one is {words} {k}", "split": split})
    captions = [{"image_id": f"s{n}", "caption": "a " + " ".join(rng.choice(WORDS, size=3)), "split": "train"}
                for n in range(images) for _ in range(2)]
    pair_ids = [f"p{n}{side}" for n in range(pairs) for side in "ab"]
    return {"pairs": write_jsonl(folder / "pairs.jsonl", records),
            "features": write_maps(folder / "pairs.h5", pair_ids),
            "captions": write_jsonl(folder / "captions.jsonl", captions),
            "aux_features": write_maps(folder / "aux.h5", [f"s{n}" for n in range(images)], seed=2)}


TINY_MODEL = ["--set", "model.num_nodes=3", "--set", "model.pool_hidden=4", "--set", "model.graph_dim=8",
              "--set", "model.embed_size=8", "--set", "model.hidden_size=8", "--set", "model.attention_size=8",
              "--set", "task.min_count=1", "--set", "task.val_beam=2", "--set", "task.val_max_len=8",
              "--set", "task.aux_batch_size=4", "--device", "cpu", "--val-every", "0"]
