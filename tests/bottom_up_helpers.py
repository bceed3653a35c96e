"""A tiny bottom-up-attention detector checkpoint for the tests of `extract-regions --regions bottom-up`: random
weights saved in the released (MILVLG) key layout, then converted as `vltools convert bottom-up-weights` does."""

from __future__ import annotations

from pathlib import Path

import torch
from test_convert_bottom_up_weights import TINY, milvlg_state, tiny_model

from vltools.data.converters.bottom_up_weights import bottom_up_checkpoint
from vltools.io.checkpoints import save_checkpoint

FEATURE_DIM = 64  # twice TINY's res4 width (8 -> 16 -> 32 channels)


def save_tiny_detector(folder: Path, seed: int = 0) -> Path:
    """`folder`/tiny_bua.pt: the tiny random detector of tests/test_convert_bottom_up_weights.py, written as a
    released checkpoint (`folder`/bua-caffe-frcn-r101-k10-100.pth) and converted from it."""
    released = folder / "bua-caffe-frcn-r101-k10-100.pth"
    torch.save({"model": milvlg_state(tiny_model(seed))}, released)
    path = folder / "tiny_bua.pt"
    save_checkpoint(path, **bottom_up_checkpoint(released, trust=False, config=TINY))
    return path
