import pytest
import torch

from vltools.devices import autocast, resolve_device
from vltools.errors import VLToolsError


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(VLToolsError, match="not a device"):
        resolve_device("gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(VLToolsError, match="no CUDA"):
            resolve_device("cuda:0")


def test_autocast_precisions():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(torch.device("cpu"), "fp32"):
        assert (a @ b).dtype == torch.float32
    with autocast(torch.device("cpu"), "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with pytest.raises(VLToolsError, match="--precision 'fp8'"):
        autocast(torch.device("cpu"), "fp8")
