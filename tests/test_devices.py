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


@pytest.fixture
def two_gpus(monkeypatch):
    """Process 1 of a torchrun job of 2 on a machine with 2 GPUs; the GPU made current is kept in the list."""
    current: list[int] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    return current


@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_under_torchrun_a_gpu_without_index_is_the_process_own(two_gpus, device):
    assert resolve_device(device) == torch.device("cuda", 1) and two_gpus == [1]


def test_under_torchrun_a_given_gpu_index_and_the_cpu_are_kept(two_gpus):
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu") and two_gpus == []


def test_more_processes_than_gpus_is_one_line(two_gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(VLToolsError, match="process 1 of a torchrun job on a machine with 1 visible GPUs; start at "
                                           "most 1 processes per machine"):
        resolve_device("cuda")
