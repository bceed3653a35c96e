"""A tiny captioning world for the captioning tests: tiny_matching's concept images with /regions and /global,
and random-initialised captioner checkpoints over its vocabulary."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from tiny_matching import make_world

from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.records import read_records, write_records
from vltools.models import build_model, schema_version
from vltools.text.captions import CaptionPreprocessing

SIZES = {"neuraltalk2": {"embed_size": 8, "hidden_size": 12, "dropout": 0.0},
         "adaptive-attention": {"embed_size": 8, "hidden_size": 12, "attention_size": 6, "dropout": 0.0}}
TINY = {name: [arg for key, value in sizes.items() for arg in ("--set", f"model.{key}={value}")]
        for name, sizes in SIZES.items()}
PREP = {"tokenizer": "karpathy", "min_count": 1, "max_words": 16}


def make_caption_world(folder: Path, n_images: int = 30, n_val: int = 10, seed: int = 0) -> tuple[Path, Path]:
    """`folder/feats.h5` (regions and their mean as /global) and `folder/caps.jsonl`; the last n_val images
    are split "val", and the val images' captions are also written again as split "test"."""
    folder.mkdir(parents=True, exist_ok=True)
    features, captions = make_world(folder, n_images=n_images, n_val=n_val, seed=seed)
    with FeaturesReader(features) as reader:
        ids, regions = list(reader.ids), reader.read(reader.ids, ["regions"])["regions"]
    features.unlink()
    with FeaturesWriter(features, {"backbone": "tiny", "weights": "none", "regions": "synthetic"},
                        dtype="float32") as writer:
        writer.add(ids, regions=regions, **{"global": regions.mean(1)})
    records = read_records(captions, "captions")
    tests = [{**r, "split": "test", "caption_id": r["caption_id"] + "t"} for r in records if r["split"] == "val"]
    write_records(captions, records + tests)
    return features, captions


def save_captioner(path: Path, name: str, captions: Path, seed: int = 0, img_dim: int = 16) -> Path:
    """A random-initialised captioner checkpoint whose vocabulary is built from the training captions."""
    words = CaptionPreprocessing(min_count=1).build_vocab(r["caption"] for r in read_records(captions, "captions")
                                                          if r["split"] == "train")
    torch.manual_seed(seed)
    config = {**SIZES[name], "img_dim": img_dim}
    model = build_model(name, config, len(words))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    save_checkpoint(path, name, config, model.state_dict(), vocab=words.words,
                    train_state={"config": {"task": dict(PREP)}}, schema=schema_version(name))
    return path


def _rewritten(source: Path, path: Path, change: Callable[[dict, list[str]], None]) -> Path:
    """A copy of captioner checkpoint `source` at `path`, its state dict edited by `change(state, vocab)`."""
    payload = load_checkpoint(source)
    state = dict(payload["state_dict"])
    change(state, payload["vocab"])
    save_checkpoint(path, payload["model"], payload["config"], state, vocab=payload["vocab"],
                    train_state=payload["train_state"], schema=payload["schema"])
    return path


def mute_captioner(source, path):
    """A copy of a captioner checkpoint whose decoder always says <end> first: every caption comes out empty."""
    def end_first(state: dict, vocab: list[str]) -> None:
        bias = state["decoder.output.bias"].clone()
        bias[vocab.index("<end>")] = 1e4
        state["decoder.output.bias"] = bias

    return _rewritten(source, path, end_first)


def overflowing_captioner(source: Path, path: Path) -> Path:
    """A copy of a captioner checkpoint whose output layer's weights are 1e6 times too large: finite in float32
    and bfloat16, past float16's 65504 under fp16, whose log-softmax then gives NaN."""
    def scaled(state: dict, vocab: list[str]) -> None:
        state["decoder.output.weight"] = state["decoder.output.weight"] * 1e6

    return _rewritten(source, path, scaled)
