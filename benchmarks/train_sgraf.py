"""One SGR (or SAF) training step of vltools against a per-caption step with the released code's structure.

Same weights (random init at the official sizes: 36 x 2048 regions, embed 1024, word 300, sim 256, 3 SGR
steps), same batch (real Flickr30K test captions from tests/data, shuffled, with random regions) and the
same step for both: forward over the batch, the hardest-negative loss with only the diagonal masked (the
released loss), backward, gradient clipping to 2, Adam.  They differ only in how the forward pass is
computed:

- released structure (Paranioar/SGRAF `train_emb`): the batch sorted by caption length (its collate
  function), images and captions encoded at once, then `EncoderSimilarity.forward`'s Python loop over
  captions, each sliced to its real words and repeated over the batch's images (`released_forward_sim`
  of benchmarks/match_sgraf.py, the same code the inference benchmark uses);
- vltools: `model(regions, None, tokens, lengths)` on the batch in its random order, as `vltools train`
  calls it (captions grouped by length into sub-blocks inside the model).

Dropout is set to 0 on both sides so that their losses and gradients can be compared; BatchNorm runs in
training mode (batch statistics) as in training.  Printed: seconds per step (wall and this process's CPU
seconds; the minimum over the timed steps after one warm-up step that creates Adam's state), their ratio,
the largest differences of the loss and of every parameter's gradient, and the peak resident memory.
`--profile` adds a torch profile of one vltools step (forward, backward, optimizer) by operator.

An epoch at the real size: each side's step time times the steps of one Flickr30K epoch (`--epoch-images` 29,000
images x 5 captions at the batch size: 1,133 steps at 128), projected from the measured steps. `--stage-images N`
also runs the whole `vltools train` stage (one epoch, a fresh process, the same thread count) on a Flickr-shaped
file of N images x 5 captions (random 36 x 2048 regions, the real captions of tests/data, a 10-image validation
split) and reads the trainer's own `seconds_per_step` log lines (data loading included, validation not): the
stage's step against the bare vltools step measured above, i.e. what the data pipeline and the loop add.

Run: `.venv/bin/python benchmarks/train_sgraf.py [--batch 128] [--steps 2] [--threads 2] [--bf16] [--profile]
[--stage-images 1280]` (the last line is one JSON object).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from flickr_1k import write_captions, write_features
from machine import cpu_model, load_average, synchronize
from match_sgraf import VOCAB, real_captions, released_forward_sim
from torch import nn

from vltools.data.converters.scan_vocab import load_vocabulary
from vltools.devices import autocast
from vltools.losses import hardest_negative_loss
from vltools.models import build_model

GRAD_CLIP = 2.0


def make_batch(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random regions and real captions in a random order (lengths from about 8 to 30 tokens)."""
    tokens, lengths = real_captions(250)
    order = torch.randperm(250, generator=torch.Generator().manual_seed(seed))[:batch]
    tokens, lengths = tokens[order], lengths[order]
    tokens = tokens[:, :int(lengths.max())]
    regions = torch.randn(batch, 36, 2048, generator=torch.Generator().manual_seed(seed + 1))
    return regions, tokens, lengths


def vltools_loss(model: nn.Module, regions: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return hardest_negative_loss(model(regions, None, tokens, lengths), margin=0.2)


def released_loss(model: nn.Module, regions: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The released train_emb's forward: batch sorted by length, per-caption similarity loop, diagonal loss."""
    order = torch.argsort(lengths, descending=True, stable=True)
    regions, tokens, lengths = regions[order], tokens[order], lengths[order]
    img_emb = model.img_enc(regions)
    cap_emb = model.txt_enc(tokens, lengths)
    sims = released_forward_sim(model.sim_enc, img_emb, cap_emb, lengths.tolist())
    return hardest_negative_loss(sims, margin=0.2)


def no_dropout(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn, batch, precision: str) -> torch.Tensor:
    """One training step on the batch's device in `precision` (vltools.devices.autocast, as the trainer runs it)."""
    optimizer.zero_grad(set_to_none=True)
    with autocast(batch[0].device, precision):
        loss = loss_fn(model, *batch)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    optimizer.step()
    return loss.detach()


def timed_steps(model: nn.Module, loss_fn, batch, steps: int, precision: str) -> dict[str, float]:
    """Wall and CPU seconds per step (minimum over `steps` after a warm-up step on 8 items), on the device of the
    model and batch (a GPU's work waited for before each clock is read)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    step(model, optimizer, loss_fn, tuple(x[:8] for x in batch), precision)
    walls, cpus = [], []
    for _ in range(steps):
        synchronize(batch[0].device)
        wall, cpu = time.perf_counter(), time.process_time()
        step(model, optimizer, loss_fn, batch, precision)
        synchronize(batch[0].device)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_s": round(min(walls), 4), "cpu_s": round(min(cpus), 4)}


def loss_and_grads(model: nn.Module, loss_fn, batch) -> tuple[float, dict[str, torch.Tensor]]:
    model = copy.deepcopy(model)
    loss = loss_fn(model, *batch)
    loss.backward()
    return float(loss.detach()), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def agreement(model: nn.Module, batch) -> dict[str, float]:
    """Largest differences of the loss and of the gradients (absolute, and relative to the largest gradient)."""
    ours_loss, ours = loss_and_grads(model, vltools_loss, batch)
    ref_loss, ref = loss_and_grads(model, released_loss, batch)
    worst = max(float((ours[k] - ref[k]).abs().max()) for k in ref)
    scale = max(float(g.abs().max()) for g in ref.values())
    return {"loss_vltools": ours_loss, "loss_released": ref_loss, "max_loss_diff": abs(ours_loss - ref_loss),
            "max_grad_diff": worst, "max_grad_diff_relative": worst / scale,
            "same_parameters_with_grad": sorted(ours) == sorted(ref)}


def profile_step(model: nn.Module, batch, rows: int = 25) -> str:
    from torch.profiler import ProfilerActivity, profile

    model = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    step(model, optimizer, vltools_loss, tuple(x[:8] for x in batch), "fp32")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(model, optimizer, vltools_loss, batch, "fp32")
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def flickr_shaped(folder: Path, images: int, val_images: int = 10, per_image: int = 5) -> tuple[Path, Path]:
    """A features file of random 36 x 2048 regions and a captions file of the real test captions, cycled (flickr_1k's
    writers), with the last `val_images` images in split "val" and the rest in "train"."""
    features, captions = folder / "flickr.h5", folder / "flickr.jsonl"
    ids = write_features(features, images + val_images)
    write_captions(captions, ids, per_image, splits=["train"] * images + ["val"] * val_images)
    return features, captions


def stage_steps(model_name: str, images: int, batch: int, threads: int) -> dict[str, object]:
    """One epoch of `vltools train` on a Flickr-shaped file: the trainer's seconds per step (data loading
    included), median over its log lines after the first, and the process's wall time and peak memory."""
    with tempfile.TemporaryDirectory() as folder:
        features, captions = flickr_shaped(Path(folder), images)
        output = Path(folder) / "model.pt"
        argv = [sys.executable, "-m", "vltools", "--quiet", "train", "--model", model_name, str(features),
                str(captions), "-o", str(output), "--vocab", str(VOCAB)]
        for setting in ("train.epochs=1", f"train.batch_size={batch}", "train.log_every=1", "train.val_every=0",
                        "train.save_every=0"):
            argv += ["--set", setting]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        start = time.perf_counter()
        subprocess.run(argv, check=True, env=env)
        wall = time.perf_counter() - start
        log = [json.loads(line) for line in Path(f"{output}.log.jsonl").read_text(encoding="utf-8").splitlines()]
        steps = [record["seconds_per_step"] for record in log if record.get("type") == "train"]
    return {"images": images, "steps": len(steps), "seconds_per_step": round(statistics.median(steps[1:]), 2),
            "process_wall_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("sgr", "saf"), default="sgr")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per side (minimum reported)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="also time both sides under bf16 autocast")
    parser.add_argument("--profile", action="store_true", help="print a torch profile of one vltools step")
    parser.add_argument("--epoch-images", type=int, default=29000, help="images of the projected epoch (x 5)")
    parser.add_argument("--stage-images", type=int, default=0,
                        help="also run `vltools train` for one epoch on this many Flickr-shaped images")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = no_dropout(build_model(args.model, {}, len(load_vocabulary(VOCAB)))).train()
    batch = make_batch(args.batch)
    lengths = batch[2]
    epoch_steps = math.ceil(args.epoch_images * 5 / args.batch)
    report: dict[str, object] = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                                 "model": args.model, "batch": args.batch, "epoch_steps": epoch_steps,
                                 "caption_lengths": [int(lengths.min()), int(lengths.max())]}
    print(f"{report['cpu']}, {report['threads']} thread(s), {args.model}, batch {args.batch}, caption lengths "
          f"{report['caption_lengths'][0]}-{report['caption_lengths'][1]} tokens", flush=True)
    report["agreement"] = agreement(model, batch)
    print("agreement: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in report["agreement"].items()), flush=True)
    for precision in ("fp32", "bf16") if args.bf16 else ("fp32",):
        before = load_average()
        released = timed_steps(model, released_loss, batch, args.steps, precision)
        ours = timed_steps(model, vltools_loss, batch, args.steps, precision)
        row = {"released_structure": released, "vltools": ours,
               "ratio_wall": round(ours["wall_s"] / released["wall_s"], 3),
               "ratio_cpu": round(ours["cpu_s"] / released["cpu_s"], 3),
               "epoch_hours_released": round(epoch_steps * released["wall_s"] / 3600, 2),
               "epoch_hours_vltools": round(epoch_steps * ours["wall_s"] / 3600, 2),
               "load_before_after": [before, load_average()]}
        report[precision] = row
        print(f"{precision}: released structure {released['wall_s']} s wall / {released['cpu_s']} s CPU per step, "
              f"vltools {ours['wall_s']} s / {ours['cpu_s']} s; vltools / released = {row['ratio_wall']} (wall), "
              f"{row['ratio_cpu']} (CPU); projected epoch ({epoch_steps} steps): released "
              f"{row['epoch_hours_released']} h, vltools {row['epoch_hours_vltools']} h; load {before} -> "
              f"{row['load_before_after'][1]}", flush=True)
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.stage_images:
        before = load_average()
        stage = {**stage_steps(args.model, args.stage_images, args.batch, args.threads),
                 "load_before_after": [before, load_average()]}
        stage["stage_over_vltools_step"] = round(stage["seconds_per_step"] / report["fp32"]["vltools"]["wall_s"], 3)
        report["stage"] = stage
        print(f"vltools train stage, {stage['images']} images, {stage['steps']} steps: {stage['seconds_per_step']} s "
              f"per step (loading included), {stage['stage_over_vltools_step']}x the bare step; process "
              f"{stage['process_wall_s']} s, peak RSS {stage['peak_rss_mb']} MB; load {before} -> "
              f"{stage['load_before_after'][1]}", flush=True)
    if args.profile:
        print(profile_step(model, batch), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
