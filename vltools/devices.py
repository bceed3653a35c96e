"""The compute device and precision, chosen the same way by every stage (`--device`, `--precision`).

Importing this module does not load torch (the functions do, when called): the command line offers PRECISIONS
as `--precision` choices in every stage's --help, which must not wait for torch.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from vltools.distributed import place
from vltools.errors import VLToolsError

if TYPE_CHECKING:
    import torch

AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}   # --precision -> the torch dtype autocast runs in
PRECISIONS = ("fp32", *AUTOCAST_DTYPES)


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when available, else CPU; `cuda[:k]` without a GPU is a one-line error; under torchrun
    `auto` and `cuda` mean this process's GPU, cuda:LOCAL_RANK."""
    import torch

    if device == "auto":
        return _own_gpu(torch.device("cuda" if torch.cuda.is_available() else "cpu"), device)
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise VLToolsError(f"--device {device!r} is not a device; use auto, cpu or cuda[:k]") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise VLToolsError(f"--device {device}: no CUDA GPU is available here; use --device cpu or auto")
    return _own_gpu(chosen, device)


def _own_gpu(chosen: torch.device, device: str) -> torch.device:
    """Under torchrun, a GPU without an index (`auto`, `cuda`) is this process's, cuda:LOCAL_RANK, made the current
    device too (so that pinned memory and kernels go to it, not to GPU 0); a given index is kept."""
    import torch

    where = place()
    if chosen.type != "cuda" or chosen.index is not None or not where.active:
        return chosen
    visible = torch.cuda.device_count()
    if where.local_rank >= visible:
        raise VLToolsError(f"--device {device}: this is process {where.local_rank} of a torchrun job on a machine "
                           f"with {visible} visible GPUs; start at most {visible} processes per machine")
    torch.cuda.set_device(where.local_rank)
    return torch.device("cuda", where.local_rank)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast to bf16 or fp16 for those precisions; plain fp32 for `fp32`."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in AUTOCAST_DTYPES:
        raise VLToolsError(f"--precision {precision!r}: use fp32, {', '.join(AUTOCAST_DTYPES)}")
    return torch.autocast(device_type=device.type, dtype=getattr(torch, AUTOCAST_DTYPES[precision]))
