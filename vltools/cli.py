"""The `vltools` command: one click group, each stage a thin command in `vltools.commands`."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from vltools import __version__
from vltools.errors import VLToolsError
from vltools.io.progress import configure, log

# stage name -> module in vltools.commands defining `command`; a stage is listed once its module exists
STAGES = {
    "synth": "synth",
    "inspect": "inspect",
    "convert": "convert",
    "score": "score",
    "extract-regions": "extract_regions",
    "segment-pool": "segment_pool",
    "merge": "merge",
    "train": "train",
    "encode": "encode",
    "match": "match",
}


class StageGroup(click.Group):
    """Loads each stage's module only when that stage runs, so `vltools --help` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, module in STAGES.items()
                      if importlib.util.find_spec(f"vltools.commands.{module}") is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        return importlib.import_module(f"vltools.commands.{STAGES[name]}").command


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
