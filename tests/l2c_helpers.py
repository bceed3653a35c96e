"""A tiny L2C world for unit tests: random feature maps and masks in a segment-pool layout, pairs, captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from vltools.io.features import FeaturesWriter
from vltools.models import build_model
from vltools.text.vocab import SPECIALS, Vocabulary

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


PAIR_VOCAB = Vocabulary([*SPECIALS, *WORDS, "the", "left", "one", "is"])
L2C_CONFIG = {"feature_dim": DIM, "num_nodes": 3, "pool_hidden": 4, "graph_dim": 8, "embed_size": 8, "hidden_size": 8,
              "attention_size": 8, "dropout": 0.0}
IMAGE_A = ["x0", "x2", "x4", "x6", "x1", "x3", "x0"]       # seven pairs: batches of 3 end with a batch of 1
IMAGE_B = ["x1", "x3", "x5", "x7", "x0", "x2", "x5"]


def random_l2c(folder: Path) -> tuple[Path, torch.nn.Module]:
    """Feature maps of images x0..x7 and a tiny random L2C model (in train mode) over PAIR_VOCAB whose BatchNorm
    running statistics are far from a batch's own."""
    maps = write_maps(folder / "maps.h5", [f"x{i}" for i in range(8)], seed=3, mask_size=6)  # masks resized to 3x3
    torch.manual_seed(0)
    model = build_model("l2c", L2C_CONFIG, len(PAIR_VOCAB))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=generator))
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
    return maps, model
