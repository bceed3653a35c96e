"""Tiny matching worlds for the matching tests: a features file, captions JSONL and random-weight checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vltools.cli import main
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesWriter
from vltools.io.records import write_records
from vltools.models import build_model
from vltools.text.vocab import SPECIALS

WORDS = ["a", "red", "green", "blue", "circle", "square", "triangle", "left", "of", "above", "small", "big"]
VOCAB = [*SPECIALS, *WORDS]
REGIONS, IMG_DIM = 4, 16
TINY = {
    "vse": {"img_dim": IMG_DIM, "embed_size": 24, "word_dim": 12},
    "sgr": {"img_dim": IMG_DIM, "embed_size": 24, "word_dim": 12, "sim_dim": 8, "num_regions": REGIONS,
            "sgr_step": 2},
    "saf": {"img_dim": IMG_DIM, "embed_size": 24, "word_dim": 12, "sim_dim": 8, "num_regions": REGIONS},
}


def tiny_model(name: str, seed: int = 0, vocab_size: int = len(VOCAB)) -> torch.nn.Module:
    """A randomly initialised small model (eval mode) with the test vocabulary."""
    torch.manual_seed(seed)
    return build_model(name, TINY[name], vocab_size).eval()


def record_moves(model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> list:
    """The devices that `model.to` is called with from now on (the move still happens): this machine has only
    the CPU, so a library call's moving its models to the device it is given shows only this way."""
    moved: list = []
    move = model.to

    def recorded(device, *args, **kwargs):
        moved.append(device)
        return move(device, *args, **kwargs)

    monkeypatch.setattr(model, "to", recorded)
    return moved


def save_tiny(path: Path, name: str, seed: int = 0, vocab: list[str] | None = None) -> Path:
    """Save a random tiny model as a vltools checkpoint; BatchNorm running stats are randomised too so that
    eval-mode outputs are not trivially the initial ones."""
    vocab = vocab or VOCAB
    model = tiny_model(name, seed, len(vocab))
    generator = torch.Generator().manual_seed(seed + 100)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
    save_checkpoint(path, name, TINY[name], model.state_dict(), vocab=vocab, schema=1)
    return path


def save_overflowing(path: Path, name: str) -> Path:
    """A tiny model whose image projection's weights are 1e5 times too large: finite in float32 and bfloat16 (whose
    range is float32's), infinite past float16's 65504, so that fp16 inference gives NaN whatever the model does to
    keep it finite."""
    model = tiny_model(name)
    with torch.no_grad():
        model.img_enc.fc.weight.mul_(1e5)
    save_checkpoint(path, name, TINY[name], model.state_dict(), vocab=VOCAB, schema=1)
    return path


def make_world(folder: Path, n_images: int = 7, per_image: int = 3, extra_images: int = 2, seed: int = 0,
               ragged: bool = True) -> tuple[Path, Path]:
    """features.h5 (n_images + extra unreferenced images, file order shuffled relative to the captions, some
    images with fewer real regions) and captions.jsonl (per_image captions each, split "test", plus a "train"
    caption that the test split must ignore)."""
    rng = np.random.default_rng(seed)
    ids = [f"img{i}" for i in range(n_images + extra_images)]
    file_order = list(rng.permutation(ids))
    regions = rng.normal(size=(len(ids), REGIONS, IMG_DIM)).astype(np.float32)
    counts = rng.integers(2, REGIONS + 1, size=len(ids)) if ragged else np.full(len(ids), REGIONS)
    for row, count in enumerate(counts):
        regions[row, count:] = 0
    features = folder / "features.h5"
    with FeaturesWriter(features, {"backbone": "random"}, dtype="float32") as writer:
        writer.add(file_order, regions=regions, num_regions=counts.astype(np.int32))
    records = []
    for k in range(per_image):
        for i in range(n_images):
            words = rng.choice(WORDS + ["unseen"], size=int(rng.integers(2, 9)))
            records.append({"image_id": f"img{i}", "caption": " ".join(words), "split": "test",
                            "caption_id": f"img{i}#{k}"})
    records.insert(3, {"image_id": "img0", "caption": "a red circle", "split": "train", "caption_id": "train0"})
    captions = folder / "captions.jsonl"
    write_records(captions, records)
    return features, captions


def fails(capsys, *args: str) -> str:
    """Run the CLI entry point in-process; assert exit status 1 with nothing on stdout; return stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--quiet", *args])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1, captured.err
    assert captured.out == ""
    return captured.err
