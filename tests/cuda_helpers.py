"""The device that the `cuda`-marked tests (tests/test_cuda.py) compare with the CPU, and why they cannot run.

CUDA by default. `VLTOOLS_TEST_SECOND_DEVICE=cpu` is their dry run on a machine without a GPU: the same tests then
compare the CPU with itself, which shows that they run and what they read, not that CUDA agrees."""

from __future__ import annotations

import os

SECOND_DEVICE_VARIABLE = "VLTOOLS_TEST_SECOND_DEVICE"


def second_device() -> str:
    """`cuda`, or the device VLTOOLS_TEST_SECOND_DEVICE names."""
    return os.environ.get(SECOND_DEVICE_VARIABLE, "cuda")


def skip_reason() -> str | None:
    """Why the `cuda` tests cannot run here ("needs a CUDA GPU"), or None when their second device is available."""
    if not second_device().startswith("cuda"):
        return None
    import torch

    return None if torch.cuda.is_available() else "needs a CUDA GPU"
