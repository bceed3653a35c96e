"""The `vltools` command: one click group, each stage a thin command in `vltools.commands`."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from vltools import __version__
from vltools.errors import VLToolsError
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
    "caption": ("caption", "Captions of images by beam search, greedy or sampling; --logp scores captions."),
    "baseline": ("baseline", "Pair descriptions that look at no image (most frequent, text-only)."),
}


class StageGroup(click.Group):
    """Loads each stage's module only when that stage runs, so `vltools --help` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (module, _) in STAGES.items()
                      if importlib.util.find_spec(f"vltools.commands.{module}") is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        return importlib.import_module(f"vltools.commands.{STAGES[name][0]}").command

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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user errors print one line on stderr and exit 1 (`--debug` shows the traceback)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="vltools", standalone_mode=False)
    except click.exceptions.Abort:
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
