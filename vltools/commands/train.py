"""`vltools train`: train a model with the shared loop; runs unchanged under torchrun (DDP)."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import (
    DEVICE,
    SEED_RANGE,
    SPLIT,
    Checked,
    FiniteFloat,
    Integer,
    precision_option,
    primary_output,
    threads_option,
)
from vltools.infer import checks
from vltools.io.kinds import sniff
from vltools.training import TASKS, check_inputs


@primary_output("output")
@click.command("train")
@click.option("--model", "model_name", required=True, type=click.Choice(sorted(TASKS)), help="Model to train.")
@click.argument("inputs", nargs=-1, required=True, type=InputFile("hdf5", "jsonl", "images"))
@click.option("-o", "--output", required=True,
              type=Checked("path", checks.training_output, click.Path(dir_okay=False)),
              help="Best checkpoint; PATH.last.pt (resume file) and PATH.log.jsonl are written beside it.")
@click.option("--config", "config_file", type=click.Path(), help="YAML file with train:, task:, model: sections.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config key (section.key or a bare key), e.g. --set model.embed_size=512.")
@click.option("--epochs", type=Integer(min=1), help="Epochs (train.epochs).")
@click.option("--batch-size", type=Integer(min=1),
              help="Global batch size, split over processes (train.batch_size).")
@click.option("--lr", type=FiniteFloat(min=0),
              help="Initial learning rate (train.lr); 0 keeps the initial weights (the semantic recipe's untrained "
              "baseline).")
@click.option("--lr-update", type=Integer(min=0),
              help="Divide the learning rate by 10 every N epochs (train.lr_update).")
@click.option("--grad-clip", type=FiniteFloat(min=0),
              help="Max total gradient norm, 0 for none (train.grad_clip).")
@click.option("--val-every", type=Integer(min=0),
              help="Validate every N iterations, 0 for epoch ends only (train.val_every).")
@click.option("--seed", type=SEED_RANGE, help="Seed of initialisation, data order and dropout (train.seed).")
@click.option("--device", type=DEVICE,
              help="auto, cpu or cuda[:k]; under torchrun each process takes its LOCAL_RANK GPU.")
@precision_option(None, "IEEE fp32 [default]; tf32 (a GPU's matmuls and convolutions in TF32, the same as fp32 "
                        "on a CPU); or forward passes autocast to bf16 or fp16 (fp16 with a gradient scaler that "
                        "skips overflowing steps; meant for GPUs) (train.precision).")
@click.option("--workers", type=Integer(min=0),
              help="DataLoader worker processes (train.workers).")
@click.option("--resume", is_flag=True,
              help="Continue from PATH.last.pt, which every run (with or without --resume) writes after each epoch "
                   "and every train.save_every steps; without it, start from the beginning, replacing a finished "
                   "run's PATH.last.pt (and saying so) and refusing an interrupted run's.")
@click.option("--vocab", type=InputFile("json", "checkpoint"),
              help="SCAN vocab JSON, vltools vocabulary file, JSON word list or checkpoint; default: built from the "
                   "training captions (--set task.vocab_splits=train+val: training and validation captions, as the "
                   "released SGRAF vocabularies).")
@click.option("--train-split", type=SPLIT, default="train", show_default=True,
              help="Split of the captions to train on.")
@click.option("--val-split", type=SPLIT, default="val", show_default=True, help="Split of the captions to validate on.")
@click.option("--objective", help="Training objective (task.objective), e.g. for captioners mle, cl, cl-p, cl-n, il.")
@click.option("--reference", type=InputFile("checkpoint"),
              help="Frozen reference checkpoint of contrastive objectives (task.reference).")
@click.option("--init", "init", type=InputFile("checkpoint"),
              help="Checkpoint whose weights and vocabulary the model starts from (task.init).")
@threads_option()
def command(model_name: str, inputs: tuple[str, ...], output: str, config_file: str | None, overrides: tuple[str, ...],
            epochs: int | None, batch_size: int | None, lr: float | None, lr_update: int | None,
            grad_clip: float | None, val_every: int | None, seed: int | None, device: str | None,
            precision: str | None, workers: int | None, resume: bool, vocab: str | None, train_split: str,
            val_split: str, objective: str | None, reference: str | None, init: str | None) -> None:
    """Train --model NAME on INPUTS (matching models and captioners: FEATS.h5 CAPS.jsonl) into the checkpoint -o PATH.

    l2c: PAIRS.jsonl FEATS.h5 [CAPTIONS.jsonl [AUX_FEATS.h5]] (segment-pool features; with single-image
    captions as the auxiliary task, their feature maps in AUX_FEATS.h5 or FEATS.h5); see the recipes in
    examples/l2c/configs/ of the vltools source tree.

    Validation runs every --val-every iterations and after each epoch; the best checkpoint is kept at
    PATH. The sgr and saf defaults are the official SGRAF hyper-parameters except four released choices, which
    only the recipes examples/sgraf/configs/*.yaml (in the vltools source tree) reproduce: train.keep_best
    epoch_end (default: any validation), task.negatives diagonal (default: other_images, so that another caption
    of the same image is no negative), task.vocab_splits train+val (default: train) and task.val_captions 5000
    (default: 0, every validation caption).
    """
    check_inputs(model_name, [(path, sniff(path, folder_ok=True)) for path in inputs])
    from vltools.training.trainer import run_training, training_config

    options = {"train.epochs": epochs, "train.batch_size": batch_size, "train.lr": lr, "train.lr_update": lr_update,
               "train.grad_clip": grad_clip, "train.val_every": val_every, "train.seed": seed,
               "train.device": device, "train.workers": workers, "train.precision": precision}
    config = training_config(model_name, config_file, overrides, options,
                             {"objective": objective, "reference": reference, "init": init})
    run_training(model_name, inputs, output, config, resume, vocab, train_split, val_split)
