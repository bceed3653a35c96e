"""The training loop shared by every model: a task supplies the model, the loss and the validation metric.

What the loop does (official SGRAF schedule): Adam; the learning rate divided by 10 every `lr_update`
epochs; gradient clipping on the total norm; validation every `val_every` iterations and after each
epoch, keeping the checkpoint with the best score at PATH (`keep_best`: from any validation, or only from
the end-of-epoch ones as the released loop does); one JSON line per logged step and per validation in
`PATH.log.jsonl`; a resume file `PATH.last.pt` (model, optimizer, RNG states and
position) written atomically after each epoch and every `save_every` iterations.

Determinism and scale: the data order is a function of (seed, epoch) only, and each global batch of
`batch_size` items is split into `world_size x accumulate` shares (an epoch's last batch is dropped when a
share would get fewer than 2 items: vltools.training.samplers), so one process with
`accumulate=N` computes the same gradients as N DistributedDataParallel processes (gradients are the
mean over shares; each share's loss sees only its own items as negatives). Random draws are the seed's too
(vltools.data.draws): before each epoch the loop tells the training data its epoch (`set_epoch`, when it has
one), so that the draws made while fetching an item depend on (seed, epoch, item) only; and a task with a
`generator` attribute gets a torch.Generator reseeded from (seed, iteration, share) before each share's loss.
So neither the number of DataLoader workers nor of processes changes them, and a resumed run draws the same.
Dropout uses torch's global generator, seeded from the seed and the rank and saved for --resume.

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
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from vltools.data.draws import LOSS, keyed_seed
from vltools.devices import PRECISIONS, autocast, float32_mode
from vltools.errors import ArgumentError, VLToolsError, argument, first_line, keep_note
from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.io.numbers import clean_numbers
from vltools.io.output import check_parent, is_device
from vltools.io.progress import labelled, log, progress
from vltools.io.provenance import input_digest
from vltools.models import check_model_config
from vltools.training import config_defaults, task_module
from vltools.training.config import KEEP_BEST, build_config, check_choice
from vltools.training.distributed import Distributed, distributed
from vltools.training.samplers import AuxiliaryBatches, GlobalBatchSampler, fetch
from vltools.training.state import (
    JsonLog,
    check_inputs,
    check_resumable,
    deterministic,
    interrupted_at,
    resume_state,
    rng_state,
    seed_everything,
    set_rng_state,
    sibling,
)

# fp16 training: a gradient that still overflows once the loss scale (65536 at the start, halved at each overflow)
# is below 1 overflows fp16 unscaled, which no scaling can save: that is divergence, not a step to skip
MIN_LOSS_SCALE = 1.0


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
        """`model` (name), `config` (full model config), `vocab`, `schema` (its config schema version,
        vltools.models.schema_version) for save_checkpoint; `inputs` (provenance)."""

    # optional: `start_epoch(model, epoch, device)`, called on every process before each epoch's data is drawn
    # (semantic retrieval re-mines its triplets with the current model there)
    # optional: `generator`, an attribute the loop sets to a torch.Generator it reseeds before each share's loss
    # (see the module docstring); draw from it in `loss` (SCO's sampled negatives)
    # optional, for a second data stream alternating with the main one (see the module docstring):
    # aux_data: Dataset; aux_batch_size: int; aux_every: int; def aux_collate(self, items) -> dict


def learning_rate(options: dict, epoch: int) -> float:
    """The official step schedule: lr / 10 every `lr_update` epochs."""
    decays = epoch // options["lr_update"] if options["lr_update"] > 0 else 0
    return options["lr"] * 0.1 ** decays


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


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
            log.info("nothing to resume for %s (no %s); starting from the beginning", self.output, self.last_path)
            resume = False
        elif not resume and self.last_path.exists():
            self._keep_interrupted_run()
        for key in ("batch_size", "accumulate", "epochs"):
            if self.options[key] < 1:
                raise VLToolsError(f"train.{key} must be at least 1, not {self.options[key]}")
        check_choice("train.keep_best", self.options["keep_best"], KEEP_BEST)
        check_choice("train.precision", self.options["precision"], PRECISIONS)
        self.model = task.model.to(env.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.options["lr"])
        # fp16's narrow range needs the loss scaled up for the backward pass; a no-op for the other precisions
        self.scaler = torch.amp.GradScaler(env.device.type, enabled=self.options["precision"] == "fp16")
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
        self.state = {"epoch": 0, "step": 0, "iteration": 0, "best": None, "skipped_steps": 0}
        self._saved_at = time.monotonic()
        self._kept: int | None = None    # the iteration the resume file holds, once this run wrote or read it
        self.log: JsonLog
        self.resume = resume
        self.generator = torch.Generator()
        if hasattr(task, "generator"):
            task.generator = self.generator
        torch.manual_seed(self.options["seed"] + env.rank)

    def run(self) -> dict:
        """Train to the configured number of epochs; return the final state (epoch, iteration, best)."""
        keep = self._resume() if self.resume else None
        self.log = JsonLog(self.log_path, keep, self.env.main)
        if not self.resume:
            self.log.write({"type": "config", "config": self.config, "world_size": self.env.world_size})
        try:
            with deterministic(self.env.device.type == "cpu"), float32_mode(self.options["precision"]):
                for epoch in range(self.state["epoch"], self.options["epochs"]):
                    self._epoch(epoch)
        except BaseException as exc:    # Ctrl-C, SIGTERM, a failure: what a rerun with --resume continues from
            total = self.options["epochs"] * self.sampler.steps
            if self._kept is not None:
                keep_note(exc, f"{self.last_path} keeps iteration {self._kept} of {total}")
            else:
                keep_note(exc, f"nothing was kept: {self.last_path} is first written after an epoch, "
                               "train.save_every steps or train.save_seconds", resumable=False)
            raise
        if self.state["skipped_steps"] and self.env.main:
            log.info("%d of %d steps were skipped: their fp16 gradients overflowed the loss scale (now %g)",
                     self.state["skipped_steps"], self.state["iteration"], self.scaler.get_scale())
        return {k: self.state[k] for k in ("epoch", "iteration", "best", "skipped_steps")}

    def _epoch(self, epoch: int) -> None:
        lr = learning_rate(self.options, epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        start_epoch = getattr(self.task, "start_epoch", None)
        if start_epoch is not None:
            start_epoch(self.model, epoch, self.env.device)
            self.model.train()
        self.sampler.set_epoch(epoch, self.state["step"])
        set_data_epoch = getattr(self.task.train_data, "set_epoch", None)
        if set_data_epoch is not None:
            set_data_epoch(epoch)
        loader = DataLoader(self.task.train_data, batch_sampler=self.sampler, collate_fn=self.task.collate,
                            num_workers=self.options["workers"], pin_memory=self.env.device.type == "cuda",
                            generator=torch.Generator().manual_seed(self.options["seed"] + epoch))
        batches = iter(loader)
        steps = self.sampler.steps
        self.model.train()
        timed = [0.0, 0]  # seconds and steps since the last loss line (data loading included, validation not)
        todo = range(self.state["step"], steps)
        if self.env.main:  # each progress line ends with the loss of the step just done (`loss` of the loop below)
            todo = progress(todo, total=len(todo), desc=f"epoch {epoch + 1}/{self.options['epochs']}", unit="steps",
                            status=lambda: f"loss {float(loss):.4f}",
                            later=(self.options["epochs"] - epoch - 1) * steps)  # time left: the whole training
        for step in todo:
            tick = time.monotonic()
            loss, norm = self._step(batches)
            timed = [timed[0] + time.monotonic() - tick, timed[1] + 1]
            self.state.update(step=step + 1, iteration=self.state["iteration"] + 1)
            iteration = self.state["iteration"]
            if self.options["log_every"] > 0 and iteration % self.options["log_every"] == 0:
                loss = self._mean_over_ranks(loss)
                scaling = {"loss_scale": self.scaler.get_scale(), "skipped_steps": self.state["skipped_steps"]} \
                    if self.scaler.is_enabled() else {}
                self.log.write({"type": "train", "epoch": epoch + 1, "iteration": iteration, "loss": loss,
                                "grad_norm": norm, "lr": lr, "seconds_per_step": timed[0] / timed[1], **scaling})
                timed = [0.0, 0]
            if step + 1 < steps:
                if self.options["val_every"] > 0 and iteration % self.options["val_every"] == 0:
                    self._validate(epoch, may_keep=self.options["keep_best"] == "any")
                if (self.options["save_every"] > 0 and iteration % self.options["save_every"] == 0
                        or self._save_due()):
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
            share = self.env.rank * accumulate + micro  # the same share of the global batch under DDP or accumulate
            self.generator.manual_seed(keyed_seed(self.options["seed"], LOSS, iteration, share))
            sync = not self.env.active or micro == accumulate - 1
            with contextlib.nullcontext() if sync else self.wrapped.no_sync():
                with autocast(self.env.device, self.options["precision"]):
                    loss = self.task.loss(self.wrapped, batch).float() / accumulate
                self.scaler.scale(loss).backward()
            total += loss.detach()
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = self.options["grad_clip"]
        norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf")))
        if not torch.isfinite(total):
            self._diverged("the loss is not finite")
        if not np.isfinite(norm):
            self._overflowed()
        self.scaler.step(self.optimizer)   # skipped by the scaler when the fp16 gradient overflowed
        self.scaler.update()
        return total, norm

    def _overflowed(self) -> None:
        """A gradient that is not finite: with fp16's loss scaling, an overflow the scaler skips (it lowers the
        scale) until the scale falls below MIN_LOSS_SCALE; in any other precision, divergence."""
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        if scale is None or scale < MIN_LOSS_SCALE:
            self._diverged("the gradient is not finite" if scale is None else
                           f"the fp16 gradient overflows even at loss scale {scale:g}")
        self.state["skipped_steps"] += 1
        log.info("iteration %d: the fp16 gradient overflowed at loss scale %g; step skipped, scale halved",
                 self.state["iteration"] + 1, scale)

    def _diverged(self, why: str) -> None:
        resume = f" (resume file: {self.last_path})" if self.last_path.exists() else ""
        raise VLToolsError(f"training diverged at iteration {self.state['iteration'] + 1}: {why}; lower train.lr, "
                           f"or check the inputs for inf/NaN{resume}")

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
                                vocab=info.get("vocab"), train_state=self._position(metrics),
                                schema=info["schema"])
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

    def _save_due(self) -> bool:
        """Whether train.save_seconds have passed since the resume file was last written (or the run started), so
        that an interruption keeps recent work whatever the epoch's length; the first process decides for all."""
        seconds = self.options["save_seconds"]
        if seconds <= 0:
            return False
        due = time.monotonic() - self._saved_at >= seconds
        if not self.env.active:      # one process: no tensor, no device sync at every step
            return due
        flag = torch.tensor(float(due), device=self.env.device)
        dist.broadcast(flag, 0)
        return bool(flag)

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
                           "log_lines": self.log.lines, "scaler": self.scaler.state_dict(),
                           "skipped_steps": self.state["skipped_steps"]}
            save_checkpoint(self.last_path, info["model"], info["config"], self.model.state_dict(),
                            vocab=info.get("vocab"), train_state=train_state, schema=info["schema"])
        self.env.barrier()
        self._saved_at, self._kept = time.monotonic(), self.state["iteration"]    # written: what Ctrl-C keeps

    def _keep_interrupted_run(self) -> None:
        """A plain run never replaces what an interrupted run kept: it refuses beside a resume file that stopped
        before its last epoch ended (as a plain per-item stage refuses beside `OUT.partial/`)."""
        stopped = interrupted_at(load_checkpoint(self.last_path), self.last_path)
        if stopped is not None:
            raise VLToolsError(f"{self.last_path}: left by an interrupted run, which stopped {stopped}; continue "
                               "it with --resume, or delete it to start again")
        log.info("starting from the beginning; %s, a finished run's resume file, will be replaced", self.last_path)

    def _resume(self) -> int:
        """Restore model, optimizer, RNG and position from PATH.last.pt; return the log lines to keep."""
        payload = load_checkpoint(self.last_path)
        saved = resume_state(payload, self.last_path, self.task.metric)
        check_resumable(saved["config"], self.config, self.last_path)
        check_inputs(saved["inputs"] or {}, self._inputs(), self.last_path)
        try:
            self.model.load_state_dict(payload["state_dict"])
            self.optimizer.load_state_dict(saved["optimizer"])
            if saved["scaler"]:   # fp16's loss scale where the interrupted run left it
                self.scaler.load_state_dict(saved["scaler"])
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            raise VLToolsError(f"{self.last_path}: its model or optimizer state does not fit this run "
                               f"({first_line(exc)}); start again without --resume") from None
        self.state = {k: saved[k] for k in ("epoch", "step", "iteration", "best", "skipped_steps")}
        self._kept = self.state["iteration"]
        states: Sequence[dict] = saved["rng"]
        if len(states) == self.env.world_size:
            set_rng_state(states[self.env.rank], self.env.device)
        else:
            log.warning("%s was written by %d process(es), this run has %d: dropout noise is reseeded",
                        self.last_path, len(states), self.env.world_size)
            torch.manual_seed(self.options["seed"] + self.env.rank + self.state["iteration"])
        log.info("resuming from %s at epoch %d of %d, iteration %d", self.last_path, self.state["epoch"] + 1,
                 self.options["epochs"], self.state["iteration"])
        return int(saved["log_lines"])


def train(task: Task, config: dict, output: str | os.PathLike, env: Distributed, resume: bool = False) -> dict:
    """Run `task` with `config` (sections train / task / model), writing PATH, PATH.last.pt, PATH.log.jsonl."""
    return Trainer(task, config, output, env, resume).run()


def training_config(model_name: str, config_file: str | os.PathLike | None = None, overrides: Sequence[str] = (),
                    options: dict[str, object] | None = None, task_options: dict[str, object] | None = None) -> dict:
    """The configuration `vltools train` and `vltools.training` run `model_name` with: its defaults, the YAML file,
    the `--set KEY=VALUE` overrides, then `options` ({"train.epochs": 2, ...}; None: not given) and
    `task_options` (objective, reference, init: refused when the model's task has no such key), each
    range-checked, and the model section checked before any file is read or anything built."""
    defaults = config_defaults(model_name)
    chosen = dict(options or {})
    for key, value in (task_options or {}).items():
        if value is not None and key not in defaults.get("task", {}):
            raise ArgumentError(key, f"is not an option of {argument('model', model_name)}")
        chosen[f"task.{key}"] = value
    config = build_config(defaults, config_file, overrides, chosen)
    check_model_config(model_name, config["model"])
    return config


def run_training(model_name: str, inputs: Sequence[str | os.PathLike], output: str | os.PathLike, config: dict,
                resume: bool = False, vocab: str | os.PathLike | None = None, train_split: str = "train",
                val_split: str = "val") -> dict:
    """Train `model_name` on `inputs` with `config` (training_config) into the checkpoint `output` (with
    OUTPUT.last.pt and OUTPUT.log.jsonl beside it), under torchrun too; returns the summary (epoch, iteration,
    best). Every log line names the model and the output: two trainings under make -j2 interleave."""
    with labelled(f"{model_name} {Path(output).name}"), distributed(config["train"]["device"]) as env:
        if train_split == val_split and env.main:
            log.warning("%s is the training split %r: the best checkpoint is picked on the data it trains on, "
                        "which says nothing of other data; give a held-out split (%s)", argument("val_split"),
                        val_split, argument("val_split", "val"))
        seed_everything(config["train"]["seed"])
        task = task_module(model_name).build_task(model_name, inputs, config, vocab=vocab, train_split=train_split,
                                                  val_split=val_split)
        summary = train(task, config, output, env, resume=resume)
        if env.main:
            log.info("trained %d epochs (%d iterations); best %s %s written to %s", summary["epoch"],
                     summary["iteration"], task.metric, clean_numbers(summary["best"]), output)
    return summary
