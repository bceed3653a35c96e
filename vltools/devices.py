"""The compute device and precision, chosen the same way by every stage (`--device`, `--precision`).

The precision policy: `fp32` is IEEE float32 on every device (CUDA's TF32 for matmuls and cuDNN's convolutions
and RNNs is switched off while a stage runs: cuDNN allows it by default); `tf32` is the explicit fast choice
(TF32 on, on GPUs that have it; the same as fp32 on a CPU); `bf16` and `fp16` autocast the forward passes,
with whatever autocast keeps in float32 run as IEEE float32 too.

Importing this module does not load torch (the functions do, when called): the command line offers PRECISIONS
as `--precision` choices in every stage's --help, which must not wait for torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from vltools.distributed import place
from vltools.errors import VLToolsError, argument

if TYPE_CHECKING:
    import torch

AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}   # --precision -> the torch dtype autocast runs in
PRECISIONS = ("fp32", "tf32", *AUTOCAST_DTYPES)


def nonfinite_advice(precision: str) -> str:
    """What to do about NaN or infinite model outputs computed in `precision`, for the one-line error that names
    it: float16's range ends at 65504, so fp16 points to fp32 (or bf16, which keeps float32's range); bf16 to
    fp32; in float32 the weights are to blame (a training that diverged)."""
    if precision == "fp16":
        return f"run with {argument('precision', 'fp32')} (or bf16, which keeps float32's range)"
    if precision == "bf16":
        return f"run with {argument('precision', 'fp32')}"
    return "check the model's weights: NaN or huge values there come from a training that diverged"


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when available, else CPU; `cuda[:k]` without a GPU is a one-line error; under torchrun
    `auto` and `cuda` mean this process's GPU, cuda:LOCAL_RANK."""
    import torch

    if device == "auto":
        return _own_gpu(torch.device("cuda" if torch.cuda.is_available() else "cpu"), device)
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise VLToolsError(f"{argument('device', repr(device))} is not a device; use auto, cpu or cuda[:k]") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise VLToolsError(f"{argument('device', device)}: no CUDA GPU is available here; use "
                           f"{argument('device', 'cpu')} or auto")
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
        raise VLToolsError(f"{argument('device', device)}: this is process {where.local_rank} of a torchrun job on a "
                           f"machine with {visible} visible GPUs; start at most {visible} processes per machine")
    torch.cuda.set_device(where.local_rank)
    return torch.device("cuda", where.local_rank)


def check_precision(precision: str) -> None:
    """A precision outside PRECISIONS is a one-line error naming the choices."""
    if precision not in PRECISIONS:
        raise VLToolsError(f"{argument('precision', repr(precision))}: use {', '.join(PRECISIONS)}")


def tf32_switches() -> list[tuple[object, str]]:
    """The (object, attribute) flags that allow TF32 in float32 work on CUDA: cuBLAS matmuls, cuDNN convolutions
    and RNNs. These are torch's `allow_tf32` flags, which every torch this project supports has; torch >= 2.9
    also offers `fp32_precision` per backend, but refuses to read either kind once both have been set."""
    import torch

    return [(torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")]


@contextlib.contextmanager
def float32_mode(precision: str) -> Iterator[None]:
    """Within: float32 work is TF32 for `tf32` and IEEE float32 for every other precision; restored after."""
    check_precision(precision)
    switches = tf32_switches()
    before = [getattr(owner, name) for owner, name in switches]
    for owner, name in switches:
        setattr(owner, name, precision == "tf32")
    try:
        yield
    finally:
        for (owner, name), value in zip(switches, before, strict=True):
            setattr(owner, name, value)


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """Run a forward pass in `precision`: float32 as `float32_mode` says, and autocast for bf16 and fp16."""
    import torch

    check_precision(precision)
    with float32_mode(precision):
        if precision in AUTOCAST_DTYPES:
            with torch.autocast(device_type=device.type, dtype=getattr(torch, AUTOCAST_DTYPES[precision])):
                yield
        else:
            yield
