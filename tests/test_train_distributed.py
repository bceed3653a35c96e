"""The single-process place of a training run (no torchrun)."""

from __future__ import annotations

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.training.distributed import distributed


def test_without_torchrun_one_main_process_on_the_chosen_device(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed("cpu") as env:
        assert (env.world_size, env.rank, env.device) == (1, 0, torch.device("cpu"))
        assert env.main and not env.active
        env.barrier()  # no process group: a no-op, not a hang


def test_a_cuda_request_without_a_gpu_is_one_line(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(VLToolsError, match="no CUDA GPU is available here"), distributed("cuda"):
        pass
