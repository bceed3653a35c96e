"""The `vltools` command: one click group, each stage a thin command in `vltools.commands`."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import signal
import sys
from collections.abc import Callable

import click

from vltools import __version__
from vltools.commands.options import is_output_param
from vltools.errors import VLToolsError, first_line
from vltools.io.atomic import OUTPUT_ERRNOS, output_error, output_lock
from vltools.io.progress import configure, log

# stage name -> (module in vltools.commands defining `command`, one-line help); a stage is listed once its module
# exists. The help is here so that `vltools --help` need not import every stage (and torch).
STAGES = {
    "synth": ("synth", "Write the deterministic synthetic world (images, captions, regions, pairs)."),
    "inspect": ("inspect", "Validate vltools files and print their kind, counts, shapes and provenance."),
    "convert": ("convert", "Import the field's formats as vltools files, and export them back."),
    "score": ("score", "Score captions, retrieval, semantic retrieval and self-retrieval."),
    "extract-regions": ("extract_regions", "Region and global features of images (detector, grid or boxes)."),
    "segment-pool": ("segment_pool", "Backbone feature maps and foreground masks for L2C."),
    "merge": ("merge", "Join features files (shards of one extraction) into one."),
    "train": ("train", "Train a model (vse, sgr, saf, neuraltalk2, adaptive-attention, l2c) and keep the best "
              "checkpoint."),
    "encode": ("encode", "Embeddings of images or captions with a separable model."),
    "match": ("match", "Rank captions for images and images for captions (rankings JSONL, sims HDF5)."),
    "report": ("report", "A static HTML gallery of rankings, captions, scores and provenance."),
    "plot": ("plot", "Training loss and validation curves of one or more training logs (PNG)."),
    "models": ("models", "List, add and remove named checkpoints and ensembles (match --model NAME)."),
    "concepts": ("concepts", "SCO's concept vocabulary: the K most frequent concept words of the captions."),
    "concept-scores": ("concept_scores", "SCO's concept scores p of images: concept CNN over r regions, max-pooled."),
    "caption": ("caption", "Captions of images by beam search, greedy or sampling; --logp scores captions."),
    "tfidf-proxy": ("tfidf_proxy", "tf-idf proxy of semantic similarity from captions, with each image's neighbours."),
    "mine-triplets": ("mine_triplets", "Hard (query, relevant, irrelevant) image triplets from a proxy (Gordo 6.1)."),
    "baseline": ("baseline", "Pair descriptions that look at no image (most frequent, text-only)."),
    "explain": ("explain", "Grad-CAM pictures of the regions that make ranked image pairs similar (Gordo Fig. 3)."),
}


def _locking(callback: Callable, outputs: frozenset[str]) -> Callable:
    """Wrap a stage's callback so it holds the lock of each output (parameters named `outputs`; see
    vltools.io.atomic) for its whole run: a second process writing the same output stops at once, before any
    work, and a missing or read-only folder is reported before the work too."""

    @functools.wraps(callback)
    def run(*args: object, **kwargs: object) -> object:
        with contextlib.ExitStack() as stack:
            for name, value in kwargs.items():
                if name in outputs and isinstance(value, str):
                    stack.enter_context(output_lock(value))
            return callback(*args, **kwargs)

    run.locks_output = True
    return run


def guard_outputs(command: click.Command) -> click.Command:
    """Make `command` (and a group's subcommands) hold its output's lock while it runs."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            guard_outputs(sub)
    elif command.callback is not None and not getattr(command.callback, "locks_output", False):
        command.callback = _locking(command.callback,
                                    frozenset(p.name for p in command.params if p.name and is_output_param(p)))
    return command


class StageGroup(click.Group):
    """Loads each stage's module only when that stage runs, so `vltools --help` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (module, _) in STAGES.items()
                      if importlib.util.find_spec(f"vltools.commands.{module}") is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        return guard_outputs(importlib.import_module(f"vltools.commands.{STAGES[name][0]}").command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, STAGES[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=StageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vltools")
@click.option("--quiet", "-q", is_flag=True, help="No progress or info lines on standard error.")
@click.option("--debug", is_flag=True, help="Show the Python traceback of errors.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, debug: bool) -> None:
    """Composable stages for vision-language research: features, matching, retrieval, captioning, scores.

    Stages read and write HDF5 (tensors) and JSONL (records); chain them in a shell script or Makefile.
    """
    ctx.obj = {"debug": debug}
    configure(quiet=quiet, debug=debug)


class Terminated(BaseException):
    """Raised by SIGTERM, so that the run unwinds like on Ctrl-C: temporary files and locks are removed."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user errors print one line on stderr and exit 1 (`--debug` shows the traceback).

    An OSError that escaped the stage (a file it could not read or write) is one line naming the file."""
    args = sys.argv[1:] if argv is None else argv
    with contextlib.suppress(ValueError):  # not the main thread (e.g. called from a test's thread)
        signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(args=args, prog_name="vltools", standalone_mode=False)
    except Terminated:
        print("vltools: terminated", file=sys.stderr)
        sys.exit(143)
    except (click.exceptions.Abort, KeyboardInterrupt):
        print("vltools: interrupted", file=sys.stderr)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except VLToolsError as exc:
        if "--debug" in args:
            log.exception("error")
        print(f"vltools: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(1)
    except OSError as exc:
        if "--debug" in args:
            log.exception("error")
        if exc.errno in OUTPUT_ERRNOS:
            message = str(output_error(exc.filename or "standard output", exc))
        elif exc.filename is not None:
            message = f"{exc.filename}: {exc.strerror or first_line(exc)}"
        else:
            message = first_line(exc)
        print(f"vltools: error: {message}", file=sys.stderr)
        sys.exit(1)
