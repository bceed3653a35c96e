import pytest
import torch

from vltools.devices import PRECISIONS, autocast, float32_mode, nonfinite_advice, resolve_device
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
    for precision in ("fp32", "tf32"):
        with autocast(torch.device("cpu"), precision):
            assert (a @ b).dtype == torch.float32
    with autocast(torch.device("cpu"), "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast(torch.device("cpu"), "fp16"):
        assert (a @ b).dtype == torch.float16
    with pytest.raises(VLToolsError, match="^precision='fp8': use "):
        autocast(torch.device("cpu"), "fp8").__enter__()


def tf32_flags() -> dict[str, bool]:
    """The flags torch runs float32 work with on CUDA: TF32 in cuBLAS matmuls, in cuDNN convolutions and RNNs."""
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("entered", ["float32_mode", "autocast"])
def test_tf32_is_on_only_for_tf32_and_the_flags_are_restored(precision, entered):
    """cuDNN allows TF32 by default, so fp32 must turn it off; only tf32 turns it on; both restore what was set."""
    for matmul, cudnn in ((False, True), (True, False)):   # torch's defaults, and the other way round
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        try:
            scope = float32_mode(precision) if entered == "float32_mode" else autocast(torch.device("cpu"), precision)
            with scope:
                expected = precision == "tf32"
                assert tf32_flags() == {"matmul": expected, "cudnn": expected}
            assert tf32_flags() == {"matmul": matmul, "cudnn": cudnn}
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True


def test_the_flags_are_restored_after_an_error():
    before = tf32_flags()
    with pytest.raises(RuntimeError, match="inside"), float32_mode("tf32"):
        raise RuntimeError("inside")
    assert tf32_flags() == before
    with pytest.raises(VLToolsError, match="^precision='fp64'"), float32_mode("fp64"):
        pass
    assert tf32_flags() == before


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


def test_nonfinite_advice_names_the_precision_to_run_instead():
    assert nonfinite_advice("fp16") == "run with precision=fp32 (or bf16, which keeps float32's range)"
    assert nonfinite_advice("bf16") == "run with precision=fp32"
    for precision in ("fp32", "tf32"):
        assert nonfinite_advice(precision).startswith("check the model's weights")
