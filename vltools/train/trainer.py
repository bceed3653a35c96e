"""The training loop shared by every model: a task supplies the model, the loss and the validation metric.

What the loop does (official SGRAF schedule): Adam; the learning rate divided by 10 every `lr_update`
epochs; gradient clipping on the total norm; validation every `val_every` iterations and after each
epoch, keeping the checkpoint with the best score at PATH (`keep_best`: from any validation, or only from
the end-of-epoch ones as the released loop does); one JSON line per logged step and per validation in
`PATH.log.jsonl`; a resume file `PATH.last.pt` (model, optimizer, RNG states and
position) written atomically after each epoch and every `save_every` iterations.

Determinism and scale: the data order is a function of (seed, epoch) only, and each global batch of
`batch_size` items is split into `world_size x accumulate` shares, so one process with
`accumulate=N` computes the same gradients as N DistributedDataParallel processes (gradients are the
mean over shares; each share's loss sees only its own items as negatives).

Auxiliary data (L2C's single-image captions beside its image pairs): a task may also give `aux_data`,
`aux_collate`, `aux_batch_size` and `aux_every`; every `aux_every`-th step then also draws a batch of
`aux_batch_size` auxiliary items, split into shares like the main batch, and the task's loss receives
both in one batch dict (the auxiliary keys prefixed `aux_`). Auxiliary batches are a function of (seed,
iteration) only, so a resumed run draws the same ones. Under `torchrun` the loop
initialises the process group from WORLD_SIZE / RANK / LOCAL_RANK (gloo on CPU, NCCL on CUDA); only
rank 0 validates and writes files.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Sampler

from vltools.devices import resolve_device
from vltools.errors import VLToolsError
from vltools.io.atomic import atomic_path, check_parent, is_device, output_error, output_lock
from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.io.numbers import dumps
from vltools.io.progress import log, progress
from vltools.io.provenance import input_digest
from vltools.train.config import KEEP_BEST, check_choice

# keys that may change between a run and its --resume (the rest fix the data order and the model)
RESUMABLE_CHANGES = {"epochs", "workers", "device", "val_every", "save_every", "log_every", "keep_best"}


class Task(Protocol):
    """What a model family gives the trainer (matching, captioning, semantic retrieval, ...)."""

    metric: str            # name of the validation score to maximise, a key of validate()'s result
    model: nn.Module
    train_data: Dataset

    def collate(self, items: list) -> dict[str, torch.Tensor]:
        """A batch of tensors from a list of `train_data` items."""

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar loss of one batch; `model` may be the DDP wrapper, so call it, not its methods."""

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """Validation metrics of the (unwrapped, eval-mode) model."""

    def checkpoint_info(self) -> dict:
        """`model` (name), `config` (full model config), `vocab` for save_checkpoint; `inputs` (provenance)."""

    # optional: `start_epoch(model, epoch, device)`, called on every process before each epoch's data is drawn
    # (semantic retrieval re-mines its triplets with the current model there)
    # optional, for a second data stream alternating with the main one (see the module docstring):
    # aux_data: Dataset; aux_batch_size: int; aux_every: int; def aux_collate(self, items) -> dict


@dataclass(frozen=True)
class Distributed:
    """This process's place in a torchrun job (world_size 1 without torchrun)."""

    world_size: int
    rank: int
    device: torch.device

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def seed_everything(seed: int) -> None:
    """Seed the generators that model construction uses (the same on every process)."""
    torch.manual_seed(seed)


@contextlib.contextmanager
def distributed(device: str) -> Iterator[Distributed]:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, NCCL on CUDA) and leave it after."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        yield Distributed(1, 0, resolve_device(device))
        return
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = resolve_device(device)
    if chosen.type == "cuda":
        chosen = torch.device("cuda", local_rank)
        torch.cuda.set_device(chosen)
    dist.init_process_group("nccl" if chosen.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=2))
    try:
        yield Distributed(world_size, rank, chosen)
    finally:
        dist.destroy_process_group()


class GlobalBatchSampler(Sampler[list[int]]):
    """Micro-batches of this process, in step order, from a (seed, epoch)-determined permutation.

    Each global batch of `batch_size` indices is split into `shares` nearly equal parts; this process
    takes parts `first, first + 1, ..., first + count - 1` (its rank's `accumulate` micro-batches). A
    last global batch smaller than `shares` is dropped. `start` skips whole global batches (resume).
    """

    def __init__(self, n: int, batch_size: int, shares: int, first: int, count: int, seed: int) -> None:
        if batch_size < shares:
            raise VLToolsError(f"batch_size {batch_size} is smaller than processes x accumulate = {shares}; "
                               "raise train.batch_size")
        if n < shares:
            raise VLToolsError(f"the training split has {n} items, fewer than processes x accumulate = {shares}")
        self.n, self.batch_size, self.shares = n, batch_size, shares
        self.first, self.count, self.seed = first, count, seed
        self.epoch, self.start = 0, 0

    @property
    def steps(self) -> int:
        """Optimizer steps per epoch."""
        full, rest = divmod(self.n, self.batch_size)
        return full + (rest >= self.shares)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        return (self.steps - self.start) * self.count

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.n, generator=generator).tolist()
        for step in range(self.start, self.steps):
            batch = order[step * self.batch_size:(step + 1) * self.batch_size]
            parts = np.array_split(np.arange(len(batch)), self.shares)
            for part in parts[self.first:self.first + self.count]:
                yield [batch[i] for i in part]


class AuxiliaryBatches:
    """This process's micro-batches of auxiliary items for a global iteration (0-based), every `every` steps.

    The k-th auxiliary batch (iteration k * every) is part k mod c of the permutation number k // c of the
    items (seeded by seed and that number), c = n // batch_size batches per pass; so the batches depend on
    (seed, iteration) only. A batch larger than the data takes all of it.
    """

    def __init__(self, n: int, batch_size: int, every: int, shares: int, first: int, count: int, seed: int) -> None:
        if every < 1:
            raise VLToolsError(f"task.aux_every must be at least 1, not {every}")
        if n < shares:
            raise VLToolsError(f"the auxiliary data has {n} items, fewer than processes x accumulate = {shares}")
        self.n, self.batch_size, self.every = n, max(min(batch_size, n), shares), every
        self.shares, self.first, self.count, self.seed = shares, first, count, seed
        self.per_pass = n // self.batch_size

    def due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def micro_batches(self, iteration: int) -> list[list[int]]:
        number, part = divmod(iteration // self.every, self.per_pass)
        generator = torch.Generator().manual_seed(self.seed * 100_003 + 7_919 * (number + 1) + 1)
        order = torch.randperm(self.n, generator=generator)[part * self.batch_size:(part + 1) * self.batch_size]
        parts = np.array_split(order.numpy(), self.shares)
        return [part.tolist() for part in parts[self.first:self.first + self.count]]


def fetch(dataset: Dataset, indices: list[int]) -> list:
    """Items `indices` of `dataset`, in one call when it reads batches at once (`__getitems__`)."""
    many = getattr(dataset, "__getitems__", None)
    return many(indices) if many is not None else [dataset[i] for i in indices]


def learning_rate(options: dict, epoch: int) -> float:
    """The official step schedule: lr / 10 every `lr_update` epochs."""
    decays = epoch // options["lr_update"] if options["lr_update"] > 0 else 0
    return options["lr"] * 0.1 ** decays


def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class JsonLog:
    """The JSONL training log: one object a line, flushed at once; `lines` counts what was written."""

    def __init__(self, path: Path, keep: int | None, enabled: bool) -> None:
        self.path, self.enabled, self.lines = path, enabled, 0
        if not enabled:
            return
        kept = []
        if keep is not None and path.exists():
            kept = path.read_text(encoding="utf-8").splitlines(keepends=True)[:keep]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(kept), encoding="utf-8")
        self.lines = len(kept)

    def write(self, record: dict) -> None:
        if self.enabled:
            try:
                with open(self.path, "a", encoding="utf-8") as stream:
                    stream.write(dumps(record) + "\n")
            except OSError as exc:
                raise output_error(self.path, exc) from exc
            self.lines += 1


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _check_resumable(saved: dict, config: dict, path: Path) -> None:
    for section, values in config.items():
        for key, value in values.items():
            old = saved.get(section, {}).get(key, value)
            if old != value and key not in RESUMABLE_CHANGES:
                raise VLToolsError(f"{path}: was written with {section}.{key}={old!r}, now {value!r}; resume with "
                                   "the same settings, or start again without --resume")


def _check_inputs(saved: dict, inputs: dict, path: Path) -> None:
    """Refuse to resume training on other data: every input recorded in the resume file (paths, split sizes,
    caption-id digests, ...) must be the same now; one line names the first that differs."""
    for key, old in saved.items():
        value = inputs.get(key)
        if old != value:
            raise VLToolsError(f"{path}: was written with input {key}={old!r}, now {value!r}; resume with the same "
                               "inputs, or start again without --resume")


@contextlib.contextmanager
def deterministic(enabled: bool) -> Iterator[None]:
    """Deterministic kernels for the duration of training (CPU runs are then bitwise repeatable)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=True)


class Trainer:
    """Runs a task's training; see the module docstring for the schedule, files and parallelism."""

    def __init__(self, task: Task, config: dict, output: str | os.PathLike, env: Distributed,
                 resume: bool = False) -> None:
        # the model section as built: the task fills in what the data fixes (e.g. the feature size)
        self.config = {**config, "model": task.checkpoint_info()["config"]}
        self.task, self.options, self.env = task, config["train"], env
        self.output = Path(output)
        self.last_path = sibling(self.output, ".last.pt")
        self.log_path = sibling(self.output, ".log.jsonl")
        check_parent(self.output)
        if is_device(self.output):
            raise VLToolsError(f"{self.output}: a device or pipe; train writes a checkpoint file (and .last.pt, "
                               ".log.jsonl beside it), give -o PATH of a file")
        if resume and not self.last_path.exists():
            raise VLToolsError(f"{self.last_path}: no resume file; train without --resume first")
        for key in ("batch_size", "accumulate", "epochs"):
            if self.options[key] < 1:
                raise VLToolsError(f"train.{key} must be at least 1, not {self.options[key]}")
        check_choice("train.keep_best", self.options["keep_best"], KEEP_BEST)
        self.model = task.model.to(env.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.options["lr"])
        self.wrapped = DistributedDataParallel(self.model, device_ids=[env.device] if env.device.type == "cuda"
                                               else None) if env.active else self.model
        accumulate = self.options["accumulate"]
        self.sampler = GlobalBatchSampler(len(task.train_data), self.options["batch_size"],
                                          env.world_size * accumulate, env.rank * accumulate, accumulate,
                                          self.options["seed"])
        self.aux = None
        if getattr(task, "aux_data", None) is not None:
            self.aux = AuxiliaryBatches(len(task.aux_data), task.aux_batch_size, task.aux_every,
                                        env.world_size * accumulate, env.rank * accumulate, accumulate,
                                        self.options["seed"])
        self.state = {"epoch": 0, "step": 0, "iteration": 0, "best": None}
        self.log: JsonLog
        self.resume = resume
        torch.manual_seed(self.options["seed"] + env.rank)

    def run(self) -> dict:
        """Train to the configured number of epochs; return the final state (epoch, iteration, best)."""
        # one writer of PATH (and so of PATH.last.pt and PATH.log.jsonl) at a time: a second run stops at once
        with output_lock(self.output):
            keep = self._resume() if self.resume else None
            self.log = JsonLog(self.log_path, keep, self.env.main)
            if not self.resume:
                self.log.write({"type": "config", "config": self.config, "world_size": self.env.world_size})
            with deterministic(self.env.device.type == "cpu"):
                for epoch in range(self.state["epoch"], self.options["epochs"]):
                    self._epoch(epoch)
        return {k: self.state[k] for k in ("epoch", "iteration", "best")}

    def _epoch(self, epoch: int) -> None:
        lr = learning_rate(self.options, epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        start_epoch = getattr(self.task, "start_epoch", None)
        if start_epoch is not None:
            start_epoch(self.model, epoch, self.env.device)
            self.model.train()
        self.sampler.set_epoch(epoch, self.state["step"])
        loader = DataLoader(self.task.train_data, batch_sampler=self.sampler, collate_fn=self.task.collate,
                            num_workers=self.options["workers"], pin_memory=self.env.device.type == "cuda",
                            generator=torch.Generator().manual_seed(self.options["seed"] + epoch))
        batches = iter(loader)
        steps = self.sampler.steps
        self.model.train()
        timed = [0.0, 0]  # seconds and steps since the last loss line (data loading included, validation not)
        todo = range(self.state["step"], steps)
        if self.env.main:
            todo = progress(todo, total=len(todo), desc=f"epoch {epoch + 1}", unit="steps")
        for step in todo:
            tick = time.monotonic()
            loss, norm = self._step(batches)
            timed = [timed[0] + time.monotonic() - tick, timed[1] + 1]
            self.state.update(step=step + 1, iteration=self.state["iteration"] + 1)
            iteration = self.state["iteration"]
            if self.options["log_every"] > 0 and iteration % self.options["log_every"] == 0:
                loss = self._mean_over_ranks(loss)
                self.log.write({"type": "train", "epoch": epoch + 1, "iteration": iteration, "loss": loss,
                                "grad_norm": norm, "lr": lr, "seconds_per_step": timed[0] / timed[1]})
                timed = [0.0, 0]
            if step + 1 < steps:
                if self.options["val_every"] > 0 and iteration % self.options["val_every"] == 0:
                    self._validate(epoch, may_keep=self.options["keep_best"] == "any")
                if self.options["save_every"] > 0 and iteration % self.options["save_every"] == 0:
                    self._save_last()
        self.state.update(epoch=epoch + 1, step=0)
        self._validate(epoch)
        self._save_last()

    def _step(self, batches: Iterator[dict]) -> tuple[torch.Tensor, float]:
        """One optimizer step over this process's `accumulate` micro-batches; (mean loss, grad norm)."""
        accumulate = self.options["accumulate"]
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.env.device)
        iteration = self.state["iteration"]
        aux = self.aux.micro_batches(iteration) if self.aux is not None and self.aux.due(iteration) else None
        for micro in range(accumulate):
            batch = next(batches)
            if aux is not None:
                extra = self.task.aux_collate(fetch(self.task.aux_data, aux[micro]))
                batch = {**batch, **{f"aux_{key}": value for key, value in extra.items()}}
            batch = to_device(batch, self.env.device)
            sync = not self.env.active or micro == accumulate - 1
            with contextlib.nullcontext() if sync else self.wrapped.no_sync():
                loss = self.task.loss(self.wrapped, batch) / accumulate
                loss.backward()
            total += loss.detach()
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = self.options["grad_clip"]
        norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf")))
        if not np.isfinite(norm):
            resume = f" (resume file: {self.last_path})" if self.last_path.exists() else ""
            raise VLToolsError(f"training diverged at iteration {self.state['iteration'] + 1}: the gradient is not "
                               f"finite; lower train.lr, or check the inputs for inf/NaN{resume}")
        self.optimizer.step()
        return total, norm

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        if self.env.active:
            value = value.clone()
            dist.all_reduce(value)
            value /= self.env.world_size
        return float(value)

    def _validate(self, epoch: int, may_keep: bool = True) -> None:
        """Rank 0 scores the model and keeps it at PATH when it is the best so far; the others wait.

        With `may_keep` False (mid-epoch validations under keep_best=epoch_end, as the released loop
        does) the scores are only logged: the model is neither kept nor counted as the best.
        """
        if self.env.main:
            self.model.eval()
            with torch.inference_mode():
                metrics = self.task.validate(self.model, self.env.device)
            self.model.train()
            score = float(metrics[self.task.metric])
            best = may_keep and (self.state["best"] is None or score > self.state["best"])
            if best:
                self.state["best"] = score
                info = self.task.checkpoint_info()
                save_checkpoint(self.output, info["model"], info["config"], self.model.state_dict(),
                                vocab=info.get("vocab"), train_state=self._position(metrics))
            self.log.write({"type": "val", "epoch": epoch + 1, "iteration": self.state["iteration"],
                            **{k: float(v) for k, v in metrics.items()}, "best": best})
            log.info("validation at iteration %d: %s %.2f%s", self.state["iteration"], self.task.metric, score,
                     " (best)" if best else "")
        self.env.barrier()

    def _position(self, metrics: dict | None = None) -> dict:
        position = {"epoch": self.state["epoch"], "step": self.state["step"], "iteration": self.state["iteration"],
                    "metric": self.task.metric, f"best_{self.task.metric}": self.state["best"],
                    "config": self.config, "inputs": self._inputs(), "world_size": self.env.world_size}
        if metrics is not None:
            position["metrics"] = {k: float(v) for k, v in metrics.items()}
        return position

    def _inputs(self) -> dict:
        """The task's inputs (paths, split sizes, id digests) and, for each input that is a file, the digest of
        its path, size and modification time: a resume on a file rewritten in place is refused too."""
        inputs = dict(self.task.checkpoint_info().get("inputs", {}))
        for key, value in list(inputs.items()):
            if isinstance(value, str) and os.path.isfile(value):
                inputs[f"{key}_file"] = input_digest([value])
        return inputs

    def _save_last(self) -> None:
        """The resume file: everything needed to continue exactly where this step left off."""
        states = [rng_state(self.env.device)]
        if self.env.active:
            gathered: list = [None] * self.env.world_size
            dist.all_gather_object(gathered, {k: v.cpu() for k, v in states[0].items()})
            states = gathered
        if self.env.main:
            info = self.task.checkpoint_info()
            train_state = {**self._position(), "optimizer": self.optimizer.state_dict(), "rng": states,
                           "log_lines": self.log.lines}
            save_checkpoint(self.last_path, info["model"], info["config"], self.model.state_dict(),
                            vocab=info.get("vocab"), train_state=train_state)
        self.env.barrier()

    def _resume(self) -> int:
        """Restore model, optimizer, RNG and position from PATH.last.pt; return the log lines to keep."""
        payload = load_checkpoint(self.last_path)
        saved = payload["train_state"]
        _check_resumable(saved.get("config", {}), self.config, self.last_path)
        _check_inputs(saved.get("inputs") or {}, self._inputs(), self.last_path)
        self.model.load_state_dict(payload["state_dict"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.state = {k: saved[k] for k in ("epoch", "step", "iteration")}
        self.state["best"] = saved.get(f"best_{self.task.metric}")
        states: Sequence[dict] = saved["rng"]
        if len(states) == self.env.world_size:
            set_rng_state(states[self.env.rank], self.env.device)
        else:
            log.warning("%s was written by %d process(es), this run has %d: dropout noise is reseeded",
                        self.last_path, len(states), self.env.world_size)
            torch.manual_seed(self.options["seed"] + self.env.rank + self.state["iteration"])
        log.info("resuming from %s at epoch %d, iteration %d", self.last_path, self.state["epoch"] + 1,
                 self.state["iteration"])
        return int(saved["log_lines"])


def train(task: Task, config: dict, output: str | os.PathLike, env: Distributed, resume: bool = False) -> dict:
    """Run `task` with `config` (sections train / task / model), writing PATH, PATH.last.pt, PATH.log.jsonl."""
    return Trainer(task, config, output, env, resume).run()
