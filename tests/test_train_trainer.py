"""The shared training loop on the tiny matching world: data order, schedule, determinism, resume after a
kill, learning, the JSONL log and the best checkpoint."""

from __future__ import annotations

import itertools
import json
import math
import os
import shlex
import signal

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from kill_helpers import kill, start_paused, stopped
from tiny_matching import TINY, chance_rsum, make_world

from vltools.cli import cli
from vltools.data.captions import read_split
from vltools.errors import VLToolsError
from vltools.eval.retrieval import retrieval_metrics
from vltools.io.checkpoints import load_checkpoint
from vltools.io.features import FeaturesReader
from vltools.models import model_from_checkpoint
from vltools.text.vocab import Vocabulary
from vltools.training.config import TRAIN_DEFAULTS, build_config
from vltools.training.distributed import distributed
from vltools.training.trainer import learning_rate, train

# 25 training images x 5 captions, batch 16: 8 steps an epoch
BASE = [*TINY, "--batch-size", "16", "--lr", "2e-3", "--val-every", "4", "--set", "train.save_every=2",
        "--set", "train.log_every=1", "--device", "cpu"]
EPOCHS = 4


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"))


def train_args(world, output, *extra):
    features, captions = world
    return ["--quiet", "train", "--model", "vse", str(features), str(captions), "-o", str(output), *BASE, *extra]


def run_inprocess(world, output, *extra):
    result = CliRunner().invoke(cli, train_args(world, output, *extra), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return load_checkpoint(f"{output}.last.pt")


def log_records(output):
    with open(f"{output}.log.jsonl", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def without_timing(records):
    return [{k: v for k, v in r.items() if k != "seconds_per_step"} for r in records]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """An uninterrupted run with seed 0 (shared by the determinism, resume and log tests)."""
    output = tmp_path_factory.mktemp("reference") / "m.pt"
    return output, run_inprocess(world, output, "--epochs", str(EPOCHS), "--seed", "0")


def test_learning_rate_steps_down_tenfold():
    options = {"lr": 2e-4, "lr_update": 30}
    for epoch, expected in ((0, 2e-4), (29, 2e-4), (30, 2e-5), (59, 2e-5), (60, 2e-6)):
        assert math.isclose(learning_rate(options, epoch), expected, rel_tol=1e-12)
    assert learning_rate({"lr": 1.0, "lr_update": 0}, 100) == 1.0


def test_same_seed_same_weights_other_seed_differs(world, reference, tmp_path):
    _, payload = reference
    again = run_inprocess(world, tmp_path / "a.pt", "--epochs", str(EPOCHS), "--seed", "0")
    assert same_weights(payload["state_dict"], again["state_dict"])
    other = run_inprocess(world, tmp_path / "b.pt", "--epochs", str(EPOCHS), "--seed", "1")
    assert not same_weights(payload["state_dict"], other["state_dict"])


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGINT])
def test_a_plain_run_stopped_part_way_resumes_saying_where_and_matches_an_uninterrupted_run(world, reference, tmp_path,
                                                                                           number):
    """A run without --resume, killed (SIGKILL) or stopped by Ctrl-C once it wrote its resume file, is refused by
    a plain rerun (which used to start over and replace the resume file), continues with --resume from the epoch
    and iteration it says, and ends where the uninterrupted run ended."""
    output = tmp_path / "m.pt"
    last = tmp_path / "m.pt.last.pt"
    # stopped at its second save (iteration 4 of 32), where the signal cannot land after the run's end
    process = start_paused("vltools.training.trainer:Trainer._save_last", 2,
                           *train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0"))
    assert kill(process, number) == (-signal.SIGKILL if number == signal.SIGKILL else 130)
    saved = load_checkpoint(last)["train_state"]
    assert (saved["epoch"], saved["iteration"]) == (0, 4)
    kept = last.read_bytes()
    again = CliRunner().invoke(cli, train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0"))
    assert again.exit_code == 1 and str(again.exception) == (
        f"{last}: left by an interrupted run, which stopped in epoch 1 of {EPOCHS}, after iteration 4; continue "
        "it with --resume, or delete it to start again")
    assert last.read_bytes() == kept
    result = CliRunner().invoke(cli, train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0",
                                                "--resume")[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"resuming from {last} at epoch 1 of {EPOCHS}, iteration 4\n" in result.stderr
    resumed = load_checkpoint(last)
    assert resumed["train_state"]["iteration"] == EPOCHS * 8
    reference_output, reference_payload = reference
    assert same_weights(resumed["state_dict"], reference_payload["state_dict"])
    assert same_weights(resumed["train_state"]["optimizer"]["state"][0],
                        reference_payload["train_state"]["optimizer"]["state"][0])
    # the log is cut back to the resume point, so it reads as if the run had never stopped
    assert without_timing(log_records(output)) == without_timing(log_records(reference_output))
    assert same_weights(load_checkpoint(output)["state_dict"], load_checkpoint(reference_output)["state_dict"])


def test_a_plain_rerun_replaces_a_finished_run_saying_so(world, reference, tmp_path):
    """What make does when an input changed: the finished run's resume file is no interrupted run to keep."""
    output = tmp_path / "m.pt"
    run_inprocess(world, output, "--epochs", "1", "--seed", "1")
    result = CliRunner().invoke(cli, train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0")[1:],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"starting from the beginning; {output}.last.pt, a finished run's resume file, will be replaced\n" \
        in result.stderr
    assert same_weights(load_checkpoint(output)["state_dict"], load_checkpoint(reference[0])["state_dict"])


def test_resume_with_nothing_to_resume_says_so_and_trains_from_the_beginning(world, reference, tmp_path):
    """It was an error ("no resume file; train without --resume first"): a Makefile could not always pass --resume."""
    output = tmp_path / "m.pt"
    result = CliRunner().invoke(cli, train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0",
                                                "--resume")[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"nothing to resume for {output} (no {output}.last.pt); starting from the beginning\n" in result.stderr
    assert same_weights(load_checkpoint(output)["state_dict"], load_checkpoint(reference[0])["state_dict"])
    assert without_timing(log_records(output)) == without_timing(log_records(reference[0]))


def test_resume_refuses_changed_settings(world, reference, tmp_path):
    output, _ = reference
    copy = tmp_path / "m.pt"
    copy.with_name("m.pt.last.pt").write_bytes(output.with_name("m.pt.last.pt").read_bytes())
    result = CliRunner().invoke(cli, train_args(world, copy, "--epochs", str(EPOCHS), "--seed", "5", "--resume"))
    assert result.exit_code != 0
    assert "was written with train.seed=0, now 5" in str(result.exception)


def test_resume_from_a_finished_checkpoint_is_one_line_and_keeps_it(world, reference, tmp_path):
    """OUT.last.pt that is a finished checkpoint (no optimizer state) was a KeyError: 'optimizer'."""
    output, _ = reference
    copy = tmp_path / "m.pt"
    copy.with_name("m.pt.last.pt").write_bytes(output.read_bytes())
    result = CliRunner().invoke(cli, train_args(world, copy, "--epochs", str(EPOCHS), "--seed", "0", "--resume"))
    assert result.exit_code == 1 and str(result.exception) == (
        f"{tmp_path / 'm.pt.last.pt'}: lacks the field 'train_state.optimizer'; it is not a resume file of vltools "
        "train (a finished checkpoint keeps no optimizer state); start again without --resume")
    assert copy.with_name("m.pt.last.pt").read_bytes() == output.read_bytes() and not copy.exists()


def test_resume_refuses_other_inputs(world, reference, tmp_path):
    output, _ = reference
    features, captions = world
    copy = tmp_path / "m.pt"
    copy.with_name("m.pt.last.pt").write_bytes(output.with_name("m.pt.last.pt").read_bytes())
    other = tmp_path / "captions.jsonl"           # the same captions, but another file: refused all the same
    other.write_bytes(captions.read_bytes())
    args = ["--quiet", "train", "--model", "vse", str(features), str(other), "-o", str(copy), *BASE, "--epochs",
            str(EPOCHS), "--seed", "0", "--resume"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert f"was written with input captions={str(captions)!r}, now {str(other)!r}; resume with the same inputs" \
        in str(result.exception)


def test_resume_refuses_an_input_rewritten_in_place(world, tmp_path):
    features, captions = world
    copied = tmp_path / "captions.jsonl"
    copied.write_bytes(captions.read_bytes())
    output = tmp_path / "m.pt"
    run_inprocess((features, copied), output, "--epochs", "1", "--seed", "0")
    copied.write_bytes(captions.read_bytes())    # the same path and bytes, written again after the run
    stat = copied.stat()
    os.utime(copied, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    args = ["--quiet", "train", "--model", "vse", str(features), str(copied), "-o", str(output), *BASE, "--epochs",
            "2", "--seed", "0", "--resume"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "was written with input captions_file=" in str(result.exception)


def test_log_has_losses_and_validations_and_best_checkpoint_is_kept(world, reference):
    output, _ = reference
    records = log_records(output)
    assert records[0]["type"] == "config" and records[0]["config"]["model"]["embed_size"] == 32
    train_lines = [r for r in records if r["type"] == "train"]
    val_lines = [r for r in records if r["type"] == "val"]
    assert [r["iteration"] for r in train_lines] == list(range(1, EPOCHS * 8 + 1))
    assert all(np.isfinite(r["loss"]) and r["lr"] == 2e-3 for r in train_lines)
    # every 4 iterations, the epoch ends (8, 16, ...) once each
    assert [r["iteration"] for r in val_lines] == list(range(4, EPOCHS * 8 + 1, 4))
    scores = [r["rsum"] for r in val_lines]
    best_index = int(np.argmax(scores))  # the first of equal maxima: later ties do not replace it
    assert [r["best"] for r in val_lines] == [s > max(scores[:i], default=-1) for i, s in enumerate(scores)]
    best = load_checkpoint(output)
    assert best["train_state"]["iteration"] == val_lines[best_index]["iteration"]
    assert best["train_state"]["best_rsum"] == pytest.approx(scores[best_index], rel=1e-7)  # the log is rounded
    # the kept weights score that rsum when evaluated independently of the trainer
    features, captions = world
    val = read_split(captions, "val")
    model = model_from_checkpoint(best)
    vocab = Vocabulary(best["vocab"])
    with FeaturesReader(features) as reader, torch.no_grad():
        regions = torch.from_numpy(reader.read(val.image_ids, ["regions"])["regions"].astype(np.float32))
        images = model.encode_images(regions, None)
    tokens = [vocab.encode(c) for c in val.captions]
    columns = []
    for ids in tokens:  # one caption at a time: no padding involved
        with torch.no_grad():
            caption = model.encode_captions(torch.tensor([ids]), torch.tensor([len(ids)]))
            columns.append(model.similarity(images, caption, torch.tensor([len(ids)]))[:, 0])
    sims = torch.stack(columns, dim=1).numpy()
    assert retrieval_metrics(sims, val.caption_image_index)["rsum"] == pytest.approx(scores[best_index], abs=1e-6)


def test_learns_well_above_chance(reference):
    output, _ = reference
    best = load_checkpoint(output)["train_state"]["best_rsum"]
    chance = chance_rsum(20)  # 20 validation images x 5 captions
    assert best > 1.6 * chance, (best, chance)


def test_training_does_not_leave_deterministic_mode_on(world, reference):
    assert not torch.are_deterministic_algorithms_enabled()
    assert os.environ.get("WORLD_SIZE") is None


class Regression:
    """A non-matching task (least squares), to show the loop is generic: metric neg_mse, no vocabulary."""

    metric = "neg_mse"

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.model = torch.nn.Linear(x.shape[1], 1)
        self.train_data = list(zip(x, y, strict=True))
        self.x, self.y = x, y

    def collate(self, items):
        return {"x": torch.stack([i[0] for i in items]), "y": torch.stack([i[1] for i in items])}

    def loss(self, model, batch):
        return torch.nn.functional.mse_loss(model(batch["x"]).squeeze(1), batch["y"])

    def validate(self, model, device):
        return {"neg_mse": -float(torch.nn.functional.mse_loss(model(self.x).squeeze(1), self.y))}

    def checkpoint_info(self):
        return {"model": "linear", "config": {"inputs": self.x.shape[1]}, "schema": 1}


def regression_config(**train):
    return build_config({"train": TRAIN_DEFAULTS}, overrides=[f"{k}={v}" for k, v in train.items()])


def test_loop_is_generic_over_tasks(tmp_path):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    torch.manual_seed(0)
    task = Regression(x, y)
    config = regression_config(epochs=40, batch_size=16, lr=0.05, lr_update=15, val_every=0, device="cpu")
    with distributed("cpu") as env:
        summary = train(task, config, tmp_path / "lin.pt", env)
    assert summary["epoch"] == 40 and summary["iteration"] == 40 * 4
    assert -summary["best"] < 1e-3  # least squares on noiseless data: the loop found the solution
    best = load_checkpoint(tmp_path / "lin.pt")
    assert best["model"] == "linear" and best["train_state"]["best_neg_mse"] == summary["best"]
    torch.testing.assert_close(best["state_dict"]["weight"], torch.tensor([[1.0, -2.0, 0.5]]), atol=0.05, rtol=0)


def test_non_finite_gradient_stops_with_a_clear_error(tmp_path):
    x = torch.ones(8, 2)
    x[3, 0] = float("inf")
    torch.manual_seed(0)
    with distributed("cpu") as env, pytest.raises(VLToolsError, match="diverged at iteration 1: the loss is not"):
        train(Regression(x, torch.zeros(8)), regression_config(batch_size=8, device="cpu"), tmp_path / "m.pt", env)


def scaled_from(monkeypatch, init_scale: float) -> None:
    """The trainer's fp16 gradient scaler starts at `init_scale` (torch's default is 2^16)."""
    scaler = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda *args, **kwargs: scaler(*args, init_scale=init_scale,
                                                                                **kwargs))


def test_fp16_overflowing_steps_are_skipped_counted_and_logged_not_divergence(tmp_path, monkeypatch, caplog):
    """Started at a loss scale of 2^40, the scaled fp16 gradients overflow until the scaler has halved the scale
    about 25 times: those steps are skipped (not divergence), counted, logged, kept for --resume, and the task is
    still learnt."""
    scaled_from(monkeypatch, 2.0 ** 40)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=generator)
    torch.manual_seed(0)
    config = regression_config(epochs=40, batch_size=16, lr=0.05, lr_update=100, val_every=0, device="cpu",
                               precision="fp16", log_every=1)
    with distributed("cpu") as env, caplog.at_level("INFO", logger="vltools"):
        summary = train(Regression(x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3), config, tmp_path / "m.pt", env)
    assert 20 <= summary["skipped_steps"] <= 30 and summary["iteration"] == 160
    assert -summary["best"] < 1e-2
    assert "step skipped, scale halved" in caplog.text and f"{summary['skipped_steps']} of 160 steps" in caplog.text
    steps = [record for record in log_records(tmp_path / "m.pt") if record["type"] == "train"]
    assert steps[0]["loss_scale"] == pytest.approx(2.0 ** 39) and steps[0]["skipped_steps"] == 1  # log: 8 digits
    assert steps[-1]["skipped_steps"] == summary["skipped_steps"] and steps[-1]["loss_scale"] < 2.0 ** 16
    saved = load_checkpoint(tmp_path / "m.pt.last.pt")["train_state"]
    assert saved["skipped_steps"] == summary["skipped_steps"]
    assert saved["scaler"]["scale"] == pytest.approx(steps[-1]["loss_scale"])


def test_fp16_overflow_at_a_loss_scale_below_one_is_divergence(tmp_path, monkeypatch):
    """Gradients of about 2e6 overflow fp16 even unscaled: no scale can save them."""
    scaled_from(monkeypatch, 0.5)
    x = torch.full((8, 2), 1000.0)
    with distributed("cpu") as env, pytest.raises(VLToolsError, match="iteration 1: the fp16 gradient overflows "
                                                                      "even at loss scale 0.5"):
        train(Regression(x, torch.zeros(8)), regression_config(batch_size=8, device="cpu", precision="fp16"),
              tmp_path / "m.pt", env)


class Normalised(Regression):
    """Regression through BatchNorm, which refuses a batch of one item in training mode (as SGR's VisualSA does)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        super().__init__(x, y)
        self.model = torch.nn.Sequential(torch.nn.BatchNorm1d(x.shape[1]), torch.nn.Linear(x.shape[1], 1))


@pytest.mark.parametrize("n, accumulate", [(17, 1), (19, 2)])
def test_a_last_batch_leaving_a_micro_batch_of_one_item_is_dropped(tmp_path, n, accumulate):
    """17 items in batches of 8 leave one; 19 in 2 accumulated shares leave 3 = shares of 2 and 1: both dropped."""
    x, y = torch.randn(n, 3, generator=torch.Generator().manual_seed(0)), torch.zeros(n)
    torch.manual_seed(0)
    config = regression_config(epochs=2, batch_size=8, accumulate=accumulate, val_every=0, device="cpu")
    with distributed("cpu") as env:
        summary = train(Normalised(x, y), config, tmp_path / "m.pt", env)
    assert summary["iteration"] == 2 * 2


class Scripted(Regression):
    """The regression task whose validations return scripted scores, one per call, to test checkpoint keeping."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, scores: list[float]) -> None:
        super().__init__(x, y)
        self.scores = list(scores)

    def validate(self, model, device):
        return {"neg_mse": self.scores.pop(0)}


@pytest.mark.parametrize("keep_best, kept_iteration, best", [("any", 2, 5.0), ("epoch_end", 8, 3.0)])
def test_keep_best_any_or_epoch_end_only(tmp_path, keep_best, kept_iteration, best):
    # 2 epochs of 4 steps, validation every 2 iterations: iterations 2, 4 (end of epoch 1), 6, 8 (end of epoch 2).
    # The mid-epoch validation at iteration 2 scores best (5.0); the released loop never keeps it.
    x, y = torch.randn(32, 3, generator=torch.Generator().manual_seed(0)), torch.zeros(32)
    torch.manual_seed(0)
    task = Scripted(x, y, [5.0, 1.0, 4.0, 3.0])
    config = regression_config(epochs=2, batch_size=8, val_every=2, keep_best=keep_best, device="cpu")
    with distributed("cpu") as env:
        summary = train(task, config, tmp_path / "m.pt", env)
    assert summary["best"] == best
    assert load_checkpoint(tmp_path / "m.pt")["train_state"]["iteration"] == kept_iteration
    vals = [r for r in log_records(tmp_path / "m.pt") if r["type"] == "val"]
    assert [r["neg_mse"] for r in vals] == [5.0, 1.0, 4.0, 3.0]   # every validation is still logged
    assert [r["best"] for r in vals] == ([True, False, False, False] if keep_best == "any" else
                                         [False, True, False, True])


def test_keep_best_must_be_a_known_choice(tmp_path):
    with distributed("cpu") as env, pytest.raises(VLToolsError, match="train.keep_best must be one of any, epoch_end"):
        train(Regression(torch.ones(8, 2), torch.zeros(8)), regression_config(keep_best="last", device="cpu"),
              tmp_path / "m.pt", env)


class Alternating(Regression):
    """Regression with an auxiliary stream of other items; records which batches each step's loss saw."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, aux: torch.Tensor, aux_batch_size: int, aux_every: int):
        super().__init__(x, y)
        self.aux_data = list(aux)
        self.aux_batch_size, self.aux_every = aux_batch_size, aux_every
        self.seen: list[tuple[int, list[int] | None]] = []

    def aux_collate(self, items):
        return {"value": torch.stack(items)}

    def loss(self, model, batch):
        aux = batch["aux_value"].long().tolist() if "aux_value" in batch else None
        self.seen.append((len(batch["x"]), aux))
        return super().loss(model, batch) + (0 * batch["aux_value"].sum() if aux else 0)


def test_auxiliary_batches_alternate_with_the_main_ones_as_configured(tmp_path):
    x, y = torch.randn(32, 3, generator=torch.Generator().manual_seed(0)), torch.zeros(32)
    aux = torch.arange(10.0)  # item i is the number i: batches show which items came
    torch.manual_seed(0)
    task = Alternating(x, y, aux, aux_batch_size=4, aux_every=2)
    config = regression_config(epochs=2, batch_size=8, val_every=0, device="cpu")
    with distributed("cpu") as env:
        train(task, config, tmp_path / "alt.pt", env)
    assert [size for size, _ in task.seen] == [8] * 8
    assert [aux is not None for _, aux in task.seen] == [True, False] * 4   # steps 1, 3, 5, 7 carry 4 aux items
    drawn = [aux for _, aux in task.seen if aux is not None]
    assert all(len(batch) == 4 for batch in drawn)
    # two aux batches a pass over the 10 items (the last 2 wait for the next pass): no repeats within a pass
    for first, second in (drawn[0:2], drawn[2:4]):
        assert not set(first) & set(second)
    assert drawn[0:2] != drawn[2:4]


def test_bf16_training_runs_under_autocast_and_learns_the_same_task(world, tmp_path):
    """--precision bf16 trains through autocast (the loss is computed in bf16 and differs from fp32) and still
    saves finite weights; an unknown precision in a config is refused naming the key."""
    payload = run_inprocess(world, tmp_path / "bf16.pt", "--epochs", "1", "--precision", "bf16")
    fp32 = run_inprocess(world, tmp_path / "fp32.pt", "--epochs", "1")
    assert payload["train_state"]["config"]["train"]["precision"] == "bf16"
    assert all(torch.isfinite(v).all() for v in payload["state_dict"].values() if v.is_floating_point())
    assert not same_weights(payload["state_dict"], fp32["state_dict"])
    result = CliRunner().invoke(cli, train_args(world, tmp_path / "x.pt", "--epochs", "1", "--set",
                                                "train.precision=fp8"))
    assert result.exit_code == 1
    assert "train.precision must be one of fp32, tf32, bf16, fp16, not 'fp8'" in str(result.exception)


def test_progress_lines_name_the_run_and_show_epoch_of_all_and_the_loss(world, tmp_path, monkeypatch):
    """Two trainings under make -j2 interleave their lines: each names the model and output; `epoch k/N` and
    the last logged loss say where a run is."""
    import re

    import vltools.cli as cli_module

    real = cli_module.configure
    monkeypatch.setattr(cli_module, "configure", lambda quiet, debug: real(quiet, debug, interval=0.0))
    output = tmp_path / "m.pt"
    args = [arg for arg in train_args(world, output, "--epochs", "2") if arg != "--quiet"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if " steps (" in line]
    assert len(lines) == 16 and all(line.startswith("vltools: vse m.pt: epoch ") for line in lines)
    assert lines[0].startswith("vltools: vse m.pt: epoch 1/2 1/8 steps") and "epoch 2/2 8/8 steps" in lines[-1]
    assert all(re.search(r" steps/s(?: = \S+ s/step)?, (\d+ min )?\d+ s left\) loss \d+\.\d{4}$", line)
               for line in lines)


def test_a_slow_training_shows_its_rate_to_two_significant_digits_and_the_time_left(world, tmp_path, monkeypatch):
    """The tester's run printed `epoch 1/1 6/25 steps (0.0 steps/s)`: a rate of 0.031 steps/s rounded to nothing,
    and no time left. Here every step takes 32.25 s (the progress clock is made slow) over 2 epochs of 8 steps."""
    import types

    import vltools.cli as cli_module
    from vltools.io import progress as progress_module

    clock = itertools.count(1000.0, 32.25)
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    real = cli_module.configure
    monkeypatch.setattr(cli_module, "configure", lambda quiet, debug: real(quiet, debug, interval=60.0))
    args = [arg for arg in train_args(world, tmp_path / "m.pt", "--epochs", "2", "--val-every", "0")
            if arg != "--quiet"]   # validation only at the end of each epoch, outside the steps' progress
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [line.rsplit(" loss ", 1)[0] for line in result.output.splitlines() if " steps (" in line]
    # a line every 2 steps (64.5 s >= 60 s); left: the rest of this epoch and all of the next at 32.25 s a step
    assert lines[:2] == ["vltools: vse m.pt: epoch 1/2 2/8 steps (0.031 steps/s = 32 s/step, 7 min 32 s left)",
                         "vltools: vse m.pt: epoch 1/2 4/8 steps (0.031 steps/s = 32 s/step, 6 min 27 s left)"]
    assert lines[-1] == "vltools: vse m.pt: epoch 2/2 8/8 steps (0.031 steps/s = 32 s/step, 0 s left)"


def test_validating_on_the_training_split_warns_naming_the_option(world, tmp_path):
    """--val-split train picked the best checkpoint on the training captions without a word."""
    result = CliRunner().invoke(cli, train_args(world, tmp_path / "m.pt", "--epochs", "1", "--val-split",
                                                "train")[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ("--val-split is the training split 'train': the best checkpoint is picked on the data it trains on, "
            "which says nothing of other data; give a held-out split (--val-split val)") in result.stderr
    plain = CliRunner().invoke(cli, train_args(world, tmp_path / "n.pt", "--epochs", "1")[1:],
                               catch_exceptions=False)
    assert "is the training split" not in plain.stderr


def test_ctrl_c_says_what_was_kept_and_a_first_epoch_keeps_its_work_after_train_save_seconds(world, tmp_path):
    """train stopped in its first epoch kept nothing and said nothing: the resume file came only after an epoch or
    train.save_every steps. With train.save_seconds it is written once that time has passed (here at every step),
    and the last line names it and the command that continues."""
    output = tmp_path / "m.pt"
    args = train_args(world, output, "--epochs", str(EPOCHS), "--seed", "0", "--set", "train.save_every=0",
                      "--set", "train.save_seconds=1e-9")
    process = start_paused("vltools.training.trainer:Trainer._save_last", 3, *args)
    assert stopped(process, signal.SIGINT) == (
        130, f"vltools: interrupted; {output}.last.pt keeps iteration 3 of {EPOCHS * 8}: continue with "
             f"{shlex.join(['vltools', '-q', *map(str, args), '--resume'])}")
    assert load_checkpoint(f"{output}.last.pt")["train_state"]["iteration"] == 3
