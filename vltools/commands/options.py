"""The option groups the stages share, each defined once: device, precision, batch and block sizes, workers,
shard and resume, outputs. A stage composes the groups it needs; its own options stay in its file.

Every value is checked here, at parse time (a usage error, exit 2), so the library below never re-validates an
option: `--precision` goes from this Choice straight to `vltools.devices.autocast`.

This module and what it imports load no torch (nor numpy): every stage's --help is built from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from vltools.devices import PRECISIONS
from vltools.errors import VLToolsError
from vltools.infer import checks
from vltools.infer.checks import MAX_BEAM, MAX_CAPTION_WORDS, MAX_IMAGE_SIDE, MAX_SEED
from vltools.infer.settings import BACKBONE_NAMES, COMMIT_SECONDS, FEATURE_DTYPES, RunOptions, parse_shard
from vltools.io.progress import log
from vltools.threads import THREADS_VARIABLE, usable_cpus, use_threads
from vltools.vision.limits import DEFAULT_MAX_PIXELS, MAX_PIXELS_LIMIT

DEVICE_HELP = ("auto (CUDA when available, else CPU), cpu, cuda or cuda:K; under torchrun auto and cuda are each "
               "process's GPU, cuda:LOCAL_RANK.")
PRECISION_HELP = ("Compute precision: fp32 is IEEE float32 on every device (TF32 off on GPUs); tf32 lets a GPU's "
                  "matmuls and convolutions use TF32 (faster; on a CPU the same as fp32); bf16 or fp16 autocast the "
                  "forward passes (fp16 is meant for GPUs; its coarse steps can tie close similarity scores).")


# what a binary output holds: its format name, or a function of the stage's parameters giving it (None: text)
Binary = str | Callable[[dict[str, object]], str | None] | None


class OutputOption(click.Option):
    """An option whose value is a path the stage writes (`@output_option(...)`): its lock is held for the
    stage's whole run, and a missing or read-only folder is refused before any work (vltools.cli); a `binary`
    output on standard output is refused before any work when that is a terminal."""

    is_output = True

    def __init__(self, *param_decls: str, binary: Binary = None, **attrs: object) -> None:
        super().__init__(*param_decls, **attrs)
        self.binary = binary


def output_option(*param_decls: str, binary: Binary = None, **attrs: object) -> Callable:
    """`click.option` for an output of a stage (e.g. `--sims PATH`), marked for `is_output_param`; `binary`
    names the format (e.g. "HDF5") when the output is not text, or is a function of the stage's parameters that
    does (e.g. caption's -o is HDF5 with --logp)."""
    return click.option(*param_decls, cls=OutputOption, binary=binary, **attrs)


def binary_format(param: click.Parameter, values: dict[str, object]) -> str | None:
    """The binary format that a stage run with parameter `values` writes to output `param`, None for text."""
    binary = getattr(param, "binary", None)
    return binary(values) if callable(binary) else binary


@dataclass(frozen=True)
class PrimaryOutput:
    """Where a stage writes its primary output, as it declares with `primary_output`: `param`, the parameter that
    names the file or folder (None when no one parameter does: the stage prints its result, or writes the files
    several options name, or the model store), `stdout`, whether standard output takes it (when `param` is
    left out or `-`; always, without `param`), and `locks`, whether the command line takes the outputs' locks
    before the stage runs (False: the stage's function in vltools.stages takes them itself, once)."""

    param: str | None = None
    stdout: bool = False
    locks: bool = True


def primary_output(param: str | None = None, stdout: bool = False,
                   locks: bool = True) -> Callable[[click.Command], click.Command]:
    """Declare where the decorated stage (put it above `@click.command`) writes its primary output: every stage
    does (tests/test_cli.py checks it), and only a failed run of one that declared standard output, and sent
    its output there, may remove the empty file the shell redirected standard output to (vltools.cli)."""

    def declare(command: click.Command) -> click.Command:
        command.primary_output = PrimaryOutput(param, stdout, locks)
        return command

    return declare


def writes_stdout(primary: PrimaryOutput | None, name: str | None, value: object) -> bool:
    """Whether output parameter `name` with `value` means standard output in a stage whose primary output is
    `primary`: `-`, or the primary output's parameter left out when it declared standard output (an extra
    output left out, such as --sims, is not written)."""
    return value == "-" or (value is None and primary is not None and primary.stdout and name == primary.param)


def is_output_param(param: click.Parameter | str | None) -> bool:
    """Whether a stage parameter (or parameter name) holds an output path: one declared with `output_option`;
    `output`/`out` (-o, or an OUT folder argument); a name ending in `_out`/`_output` or starting with `out_`
    (e.g. `features_out`, `out_dir`)."""
    if isinstance(param, click.Parameter):
        if getattr(param, "is_output", False):
            return True
        param = param.name
    return bool(param) and (param in ("output", "out") or param.endswith(("_out", "_output"))
                            or param.startswith("out_"))


def option_spelling(name: str, value: str | None = None) -> str:
    """How the running stage spells the argument the library calls `name` (`vltools.errors.argument`): the
    option whose parameter or flag is that name (`top_k`: --top-k, `model`: --model, `global_pool`: --global),
    an argument's metavar (FEATURES), else the name as an option; with `value`, `--model CHECKPOINT`."""
    ctx = click.get_current_context(silent=True)
    spelling = "--" + name.replace("_", "-")
    for param in ctx.command.params if ctx is not None else ():
        flags = [flag for flag in param.opts if flag.startswith("--")]
        if param.name == name or any(flag[2:].replace("-", "_") == name for flag in flags):
            if getattr(param, "is_flag", False):
                return max(flags, key=len)     # a flag takes no value: `trust=True` is `--trust`
            spelling = max(flags, key=len) if flags else param.human_readable_name
            break
    return spelling if value is None else f"{spelling} {value}"


def check_shard(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A malformed --shard is a usage error (exit 2), found before any model is built."""
    try:
        parse_shard(value)
    except VLToolsError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None
    return value


def apply(options: list[Callable], func: Callable) -> Callable:
    """Decorate `func` with `options` so they are listed in the given order in --help."""
    for option in reversed(options):
        func = option(func)
    return func


def device_option(help: str = DEVICE_HELP) -> Callable:
    """`--device`: where the model runs."""
    return click.option("--device", type=DEVICE, default="auto", show_default=True, help=help)


def precision_option(default: str | None = "fp32", help: str = PRECISION_HELP) -> Callable:
    """`--precision fp32|tf32|bf16|fp16`, the same choices wherever a model runs."""
    return click.option("--precision", type=click.Choice(PRECISIONS), default=default,
                        show_default=default is not None, help=help)


def _use_threads(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    """Apply --threads (or the default) when the options are parsed, before the stage imports torch; more threads
    than usable CPUs are warned about (they would wait for each other)."""
    count, cpus = use_threads(value), usable_cpus()
    if count > cpus:
        source = "--threads" if value else THREADS_VARIABLE
        log.warning("%s asks for %d threads on the %d CPU%s this process may use: they will wait for each other; "
                    "give --threads %d or fewer", source, count, cpus, "s" if cpus > 1 else "", cpus)
    log.debug("computing with %d CPU threads (%d CPUs usable)", count, cpus)


def threads_option() -> Callable:
    """`--threads N`: the CPU threads a stage computes with (vltools.threads), on every stage that computes."""
    return click.option("--threads", type=Integer(min=1), expose_value=False, callback=_use_threads,
                        help=f"CPU threads of the computation [{THREADS_VARIABLE} when set, else the CPUs this "
                             "process may use: its CPU affinity, at most its container's CPU quota].")


def batch_size_option(default: int | None, help: str | None = None) -> Callable:
    """`--batch-size`: items per model call."""
    return click.option("--batch-size", type=Integer(min=1), default=default,
                        show_default=default is not None, help=help or "Items per model call.")


def workers_option(default: int | None, help: str | None = None) -> Callable:
    """`--workers`: DataLoader processes decoding inputs while the model runs."""
    return click.option("--workers", type=Integer(min=0), default=default, show_default=default is not None,
                        help=help or "DataLoader processes decoding inputs while the model runs (0 = in-process).")


def shard_option() -> Callable:
    """`--shard I/N`: the I-th of N runs of the inputs, into its own file or as part I of N of a set in a folder
    (vltools.io.shards), read by later stages as one input; `vltools merge` joins them."""
    return click.option("--shard", metavar="I/N", callback=check_shard,
                        help="Process the I-th of N runs of the inputs (0 <= I < N). With -o FOLDER/ it writes "
                             "FOLDER/part-I-of-N (every stage reads the folder as one input once all N are there); "
                             "`vltools merge` joins shards or a folder into one file.")


def resume_option(same: str = "-o, inputs and options", items: str = "items", where: str = "OUT.partial/",
                  note: str = "") -> Callable:
    """`--resume` and `--checkpoint-seconds`: every run of a per-item stage keeps its finished items in its
    checkpoint as it goes (vltools.io.checkpoint), and --resume continues from it; `note` says which runs of the
    stage do not (a sentence, or nothing)."""
    return lambda func: apply([
        click.option("--resume", is_flag=True,
                     help=f"Continue an interrupted run with the same {same}: every run, with or without --resume, "
                          f"keeps its finished {items} in {where} as it goes; --resume skips them and says how "
                          "many, or that there is nothing to resume; the inputs of an item changed since are "
                          f"computed again.{' ' + note if note else ''}"),
        click.option("--checkpoint-seconds", type=FiniteFloat(min=0), default=COMMIT_SECONDS, show_default=True,
                     help=f"Finished {items} are made durable in {where} (for --resume) once this many seconds "
                          "have passed since the last time, and when the run stops: a kill -9 loses at most this "
                          "much work or the batch in progress."),
    ], func)


def _alias(old: str, name: str) -> Callable:
    """A hidden option `old` for parameter `name` (an old spelling kept for one release); `_aliased` reads it."""

    def store(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
        if value is not None:
            ctx.meta[f"alias:{name}"] = value

    return click.option(old, type=Integer(min=1), hidden=True, expose_value=False, callback=store)


def _aliased(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """The value of the old spelling when only it was given."""
    if ctx.get_parameter_source(param.name) is click.core.ParameterSource.DEFAULT:
        return ctx.meta.get(f"alias:{param.name}", value)
    return value


def block_options(images: int, captions: int) -> Callable:
    """`--block-images` x `--block-captions`: the images x captions block one model call scores (memory grows
    with their product); `--batch-images` / `--batch-captions` are hidden aliases kept for one release."""
    return lambda func: apply([
        _alias("--batch-images", "block_images"),
        _alias("--batch-captions", "block_captions"),
        click.option("--block-images", type=Integer(min=1), default=images, show_default=True,
                     callback=_aliased, help="Images per block of the images x captions matrix."),
        click.option("--block-captions", type=Integer(min=1), default=captions, show_default=True,
                     callback=_aliased,
                     help="Captions per block; working memory grows with block images x block captions."),
    ], func)


def image_run_options(func: Callable) -> Callable:
    """The options every image-extraction stage shares (devices, batching, output dtype, resume, shard)."""
    return apply([
        output_option("-o", "--output", "output", type=click.Path(), binary="HDF5",
                      help="Output features HDF5, or a folder of parts (--shard I/N, torchrun) (default: standard "
                           "output, never a terminal)."),
        click.option("--backbone", type=click.Choice(BACKBONE_NAMES), default="resnet101", show_default=True,
                     help="Torchvision network; features come from its last convolutional stage."),
        click.option("--weights", default="imagenet", show_default=True,
                     help="imagenet (torchvision IMAGENET1K_V1), imagenet-v2 (ResNet-50/101/152), none (random, "
                          "for tests), or PATH to a torchvision-layout state dict (e.g. `vltools synth-backbone`'s "
                          "for the synthetic world) or a vltools checkpoint."),
        batch_size_option(8, "Images per forward pass."),
        workers_option(2, "DataLoader processes decoding images while the model runs (0 = decode in-process)."),
        device_option(),
        precision_option(),
        threads_option(),
        click.option("--dtype", type=click.Choice(FEATURE_DTYPES), default="float16", show_default=True,
                     help="Storage type of the feature datasets."),
        click.option("--strict", is_flag=True, help="Stop with an error at the first unreadable image (exit 1, "
                                                    "no output) instead of skipping it."),
        resume_option(items="images"),
        shard_option(),
        click.option("--max-pixels", type=Integer(1, MAX_PIXELS_LIMIT), default=DEFAULT_MAX_PIXELS,
                     show_default=True,
                     help="Images with more pixels are skipped as possible decompression bombs."),
        click.option("--seed", type=SEED_RANGE, default=0, show_default=True,
                     help="Seed of random initialisation (--weights none)."),
    ], func)



def make_run(batch_size: int, workers: int, device: str, precision: str, dtype: str, strict: bool, resume: bool,
             checkpoint_seconds: float, max_pixels: int, seed: int) -> RunOptions:
    """RunOptions from `image_run_options`."""
    return RunOptions(batch_size=batch_size, workers=workers, device=device, precision=precision, dtype=dtype,
                      strict=strict, resume=resume, commit_seconds=checkpoint_seconds, max_pixels=max_pixels,
                      seed=seed)


class Integer(click.IntRange):
    """The one type of every integer option: `vltools.infer.checks.integer` in its range, the check the Python
    API makes too; a value out of range is a usage error (exit 2) naming the option, before any work."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = click.INT.convert(value, param, ctx)
        try:
            return checks.integer(number, param.name if param else "value", self.min, self.max)
        except checks.ArgumentError as exc:
            self.fail(exc.problem, param, ctx)


class FiniteFloat(click.FloatRange):
    """The one type of every float option: `vltools.infer.checks.number`, a finite number in its range; NaN, an
    infinity or a value out of range is a usage error (exit 2) naming the option, before any work (click's
    FloatRange lets NaN through)."""

    name = "number"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        try:
            return checks.number(number, param.name if param else "value", self.min, self.max, self.min_open,
                                 self.max_open)
        except checks.ArgumentError as exc:
            self.fail(exc.problem, param, ctx)


class Checked(click.ParamType):
    """The type of options whose values one validator of `vltools.infer.checks` takes, the one the Python API calls
    too: a value it refuses is a usage error (exit 2) naming the option, before any work (a misspelt --device such
    as gpu at once instead of after torch has loaded; an empty --split, or one holding ESC, before it is written
    into records and file names); `then`: a click type the value goes through next (click.Path's checks)."""

    def __init__(self, name: str, check: Callable[[object, str], str], then: click.ParamType | None = None) -> None:
        self.name, self.check, self.then = name, check, then

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            value = self.check(value, param.name if param else self.name)
        except checks.ArgumentError as exc:
            self.fail(exc.problem, param, ctx)
        return value if self.then is None else self.then.convert(value, param, ctx)


def image_side(min_side: int = 16) -> Integer:
    """The type of every image-size and crop-size option: `min_side` to MAX_IMAGE_SIDE pixels."""
    return Integer(min_side, MAX_IMAGE_SIDE)


CAPTION_WORDS = Integer(1, MAX_CAPTION_WORDS)   # the type of every --max-len
BEAMS = Integer(1, MAX_BEAM)                    # the type of every --beam
SEED_RANGE = Integer(0, MAX_SEED)               # the type of every --seed: what numpy, torch and random all accept
DEVICE = Checked("device", checks.device)       # the type of every --device
SPLIT = Checked("split", checks.split)          # the type of every option naming a split (--split, --train-split...)
