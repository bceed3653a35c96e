"""Training a task family in each `--precision` on the CPU, with CUDA's float32 op list emulated for bf16 and fp16
(tests/cuda_autocast.py), so that a product of mixed precisions that only a GPU would meet fails here too."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from cuda_autocast import cuda_float32_ops
from reproducible import step_losses

# how far the first step's loss may be from fp32's, relative (bf16 keeps 8 bits of mantissa, fp16 11)
FIRST_STEP_TOLERANCE = {"bf16": 0.05, "fp16": 0.01}


def assert_trains_in_every_precision(build: Callable[[dict], object], config: dict, folder: Path,
                                     atol: float = 0.0) -> None:
    """One epoch of `build(config)`'s task in each precision: tf32 is fp32 on a CPU, step for step; bf16 and fp16
    give finite losses, the first within FIRST_STEP_TOLERANCE of fp32's (plus `atol`, for a loss that is a small
    difference of larger terms, whose rounding error is the terms')."""
    fp32 = step_losses(build, config, folder / "fp32.pt", seed=3, workers=0)
    assert fp32 and all(math.isfinite(loss) for loss in fp32)
    assert step_losses(build, config, folder / "tf32.pt", seed=3, workers=0, precision="tf32") == fp32
    for precision, tolerance in FIRST_STEP_TOLERANCE.items():
        with cuda_float32_ops():
            low = step_losses(build, config, folder / f"{precision}.pt", seed=3, workers=0, precision=precision)
        assert len(low) == len(fp32) and all(math.isfinite(loss) for loss in low), (precision, low)
        assert abs(low[0] - fp32[0]) <= tolerance * abs(fp32[0]) + atol, (precision, low[0], fp32[0])
