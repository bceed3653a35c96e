"""The `vltools` command: one click group, each stage a thin command in `vltools.commands`."""

from __future__ import annotations

import atexit
import contextlib
import difflib
import errno
import functools
import gc
import importlib
import importlib.util
import os
import shlex
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from vltools import __version__
from vltools.commands.inputs import check_files, take_stdin
from vltools.commands.options import PrimaryOutput, binary_format, is_output_param, option_spelling, writes_stdout
from vltools.errors import ArgumentError, VLToolsError, first_line, kept_note, spelled
from vltools.io.lock import output_lock
from vltools.io.output import is_device, is_stdout, refuse_terminal
from vltools.io.progress import configure, log
from vltools.io.write_errors import OUTPUT_ERRNOS, output_error
from vltools.training import TASKS

# stage name -> (module in vltools.commands defining `command`, one-line help); a stage is listed once its module
# exists. The help is here so that `vltools --help` need not import every stage (and torch).
STAGES = {
    "synth": ("synth", "Write the deterministic synthetic world (images, captions, regions, pairs)."),
    "synth-backbone": ("synth_backbone", "A backbone trained on the synthetic world's labels (--weights PATH)."),
    "inspect": ("inspect", "Validate vltools files and print their kind, counts, shapes and provenance."),
    "convert": ("convert", "Import the field's formats as vltools files, and export them back."),
    "score": ("score", "Score captions, retrieval, semantic retrieval and self-retrieval."),
    "extract-regions": ("extract_regions", "Region and global features of images (detector, grid or boxes)."),
    "segment-pool": ("segment_pool", "Backbone feature maps and foreground masks for L2C."),
    "merge": ("merge", "Join features files (shards of one extraction) into one."),
    "train": ("train", f"Train a model ({', '.join(TASKS)}) and keep the best checkpoint."),
    "encode": ("encode", "Embeddings of images or captions with a separable model."),
    "index": ("index", "A FAISS index of embeddings, saved with its provenance (match --index-file)."),
    "search": ("search", "Images of a saved index or embeddings for query texts or images (rankings JSONL)."),
    "match": ("match", "Rank captions for images and images for captions (rankings JSONL, sims HDF5)."),
    "report": ("report", "A static HTML gallery of rankings, captions, scores and provenance."),
    "plot": ("plot", "Training loss and validation curves of one or more training logs (PNG)."),
    "models": ("models", "List, add and remove named checkpoints and ensembles (match --model NAME)."),
    "concepts": ("concepts", "SCO's concept vocabulary: the K most frequent concept words of the captions."),
    "concept-scores": ("concept_scores", "SCO's concept scores p of images: concept CNN over r regions, max-pooled."),
    "caption": ("caption", "Captions of images by beam search, greedy or sampling; --logp scores captions."),
    "tfidf-proxy": ("tfidf_proxy", "Caption proxy of semantic similarity (tf-idf, word2vec + FV), with neighbours."),
    "caption-kernel": ("caption_kernel", "METEOR match kernel of two images' captions for user-study pairs (Gordo 4)."),
    "mine-triplets": ("mine_triplets", "Hard (query, relevant, irrelevant) image triplets from a proxy (Gordo 6.1)."),
    "baseline": ("baseline", "Pair descriptions that look at no image (most frequent, text-only)."),
    "explain": ("explain", "Grad-CAM pictures of the regions that make ranked image pairs similar (Gordo Fig. 3)."),
}

# stage name -> the example at the end of the stage's --help: command lines (a long one continued by " \\") that
# run as printed, offline, on the synthetic world. The examples form one chain in this order, in one folder: each
# uses the world and the files the examples before it write, and starts with the commands that make what only it
# needs (a checkpoint, shards); tests/test_cli_examples.py runs them all from the help texts.
EXAMPLES = {
    "synth": "vltools synth world --images 40 --pairs 20 --aux-images 0",
    "synth-backbone": "vltools synth-backbone world --epochs 1 -o synth_resnet18.pt",
    "inspect": "vltools inspect world/captions.jsonl world/images.jsonl",
    "extract-regions": "vltools extract-regions world/images.jsonl --regions grid --global avg --backbone resnet18 \\\n"
                       "    --weights none --image-size 96 -o feats.h5",
    "merge": "vltools extract-regions world/images.jsonl --regions grid --global avg --backbone resnet18 \\\n"
             "    --weights none --image-size 96 --shard 0/2 -o feats.0.h5\n"
             "vltools extract-regions world/images.jsonl --regions grid --global avg --backbone resnet18 \\\n"
             "    --weights none --image-size 96 --shard 1/2 -o feats.1.h5\n"
             "vltools merge feats.0.h5 feats.1.h5 -o feats.h5",
    "segment-pool": "vltools segment-pool world/pair_images.jsonl --masks world/pair_masks --backbone resnet18 \\\n"
                    "    --weights none --image-size 64 -o maps.h5",
    "train": "vltools train --model vse feats.h5 world/captions.jsonl --epochs 1 --set model.embed_size=64 \\\n"
             "    --set model.word_dim=32 -o vse.pt",
    "encode": "vltools encode world/captions.jsonl --model vse.pt -o caption_emb.h5",
    "match": "vltools match --model vse.pt feats.h5 world/captions.jsonl --sims sims.h5 -o ranks.jsonl",
    "index": "vltools encode feats.h5 --model vse.pt -o image_emb.h5\n"
             "vltools index image_emb.h5 -o images.index.h5\n"
             "vltools match caption_emb.h5 --index-file images.index.h5 -k 5 -o t2i.jsonl",
    "search": "vltools search images.index.h5 --model vse.pt --query \"a red circle\" -k 5 -o found.jsonl",
    "score": "vltools score retrieval ranks.jsonl --captions world/captions.jsonl",
    "report": "vltools report site --rankings ranks.jsonl --captions world/captions.jsonl --images world/images.jsonl",
    "plot": "vltools plot vse.pt.log.jsonl -o curves.png",
    "models": "vltools models add my-vse vse.pt",
    "caption": "vltools train --model neuraltalk2 feats.h5 world/captions.jsonl --epochs 1 \\\n"
               "    --set model.embed_size=64 --set model.hidden_size=64 -o neuraltalk2.pt\n"
               "vltools caption --model neuraltalk2.pt feats.h5 world/captions.jsonl --split test -o generated.jsonl",
    "convert": "vltools convert to-coco-results generated.jsonl -o results.json",
    "concepts": "vltools concepts world/captions.jsonl -k 32 -o concepts.json",
    "concept-scores": "vltools train --model concepts world/images.jsonl world/captions.jsonl concepts.json \\\n"
                      "    --epochs 1 --set model.backbone=resnet18 --set task.weights=none \\\n"
                      "    --set task.image_size=48 -o concepts.pt\n"
                      "vltools concept-scores world/images.jsonl --model concepts.pt --image-size 96 --levels 1,2 \\\n"
                      "    -o concept_scores.h5",
    "tfidf-proxy": "vltools tfidf-proxy world/captions.jsonl --k 8 -o proxy.h5",
    "mine-triplets": "vltools mine-triplets proxy.h5 -o triplets.jsonl",
    "caption-kernel": "vltools caption-kernel world/regions.jsonl --pairs world/user_study.jsonl -o kernel.jsonl\n"
                      "vltools score semantic kernel.jsonl --triplets world/user_study.jsonl",
    "baseline": "vltools baseline most-frequent world/pairs.jsonl --split test -o descriptions.jsonl",
    "explain": "vltools train --model rmac world/images.jsonl proxy.h5 --epochs 1 --batch-size 16 \\\n"
               "    --set model.backbone=resnet18 --set model.scales=1.0 --set task.weights=none \\\n"
               "    --set task.image_size=64 --set task.mine_every=2 -o rmac.pt\n"
               "vltools encode world/images.jsonl --model rmac.pt -o image_emb.h5\n"
               "vltools match image_emb.h5 image_emb.h5 -o i2i.jsonl\n"
               "vltools explain i2i.jsonl --model rmac.pt --images world/images.jsonl --queries 4 -o figure3",
}


def with_example(command: click.Command, example: str) -> click.Command:
    """Put `example` first in the epilog of `command`'s --help (once), its lines kept as they are."""
    shown = "\b\nExample:\n" + "\n".join(f"  {line}" for line in example.splitlines())
    if not (command.epilog or "").startswith(shown):
        command.epilog = shown + (f"\n\n{command.epilog}" if command.epilog else "")
    return command


def _guarded(callback: Callable, params: list[click.Parameter], primary: PrimaryOutput | None) -> Callable:
    """Wrap a stage's callback so that its input files are checked (vltools.commands.inputs: a missing file, one of
    the wrong kind, two swapped) and it holds the lock of each output (vltools.io.lock), once, for its whole run
    (unless the stage's function takes them itself: `PrimaryOutput.locks`): a second process writing the same
    output stops at once, before any work, and a missing or read-only folder, or binary data for a terminal, is
    reported before the work too. Standard input is read last, when all else has
    been checked (HDF5 on it is copied to a temporary file, removed when the stage ends)."""
    outputs = {p.name: p for p in params if p.name and is_output_param(p)}

    @functools.wraps(callback)
    def run(*args: object, **kwargs: object) -> object:
        stage = click.get_current_context().command_path
        given = check_files(params, kwargs, stage)
        for name, param in outputs.items():
            what = binary_format(param, kwargs)
            if what is not None and writes_stdout(primary, name, kwargs.get(name)):
                refuse_terminal(what)
        with contextlib.ExitStack() as stack:
            if primary is None or primary.locks:
                stack.enter_context(output_lock(*(value for name, value in kwargs.items()
                                                  if name in outputs and isinstance(value, str))))
            _refuse_interrupted(primary, kwargs)
            return callback(*args, **take_stdin(params, kwargs, given, stage, stack))

    run.locks_output = True
    return run


def _refuse_interrupted(primary: PrimaryOutput | None, kwargs: dict[str, object]) -> None:
    """A plain run of a per-item stage beside what an interrupted run committed (`OUT.partial/`) is refused before
    the stage loads torch and its models (7-11 s), as its checkpoint would refuse it later."""
    out = kwargs.get(primary.param) if primary is not None and primary.param else None
    if "resume" in kwargs and isinstance(out, str) and not is_stdout(out) and not is_device(out):
        from vltools.io.checkpoint import committed_chunks

        committed_chunks(Path(f"{out}.partial"), bool(kwargs["resume"]))


def guard_outputs(command: click.Command) -> click.Command:
    """Make `command` (and a group's subcommands) check its inputs before it runs and hold its output's lock while
    it runs (`_guarded`)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            guard_outputs(sub)
    elif command.callback is not None and not getattr(command.callback, "locks_output", False):
        command.callback = _guarded(command.callback, command.params, getattr(command, "primary_output", None))
    return command


class ClosedPipe(Exception):
    """The reader of standard output closed it (`vltools ... | head`): the run ends quietly with status 0."""


class StageGroup(click.Group):
    """Loads each stage's module only when that stage runs, so `vltools --help` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (module, _) in STAGES.items()
                      if importlib.util.find_spec(f"vltools.commands.{module}") is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        command = importlib.import_module(f"vltools.commands.{STAGES[name][0]}").command
        return guard_outputs(with_example(command, EXAMPLES[name]))

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """The stage `args` names; a name that is no stage (and no option) is a usage error naming the nearest stage
        (`extrac-regions`: did you mean 'extract-regions'?), which click cannot find among stages it has not loaded."""
        name = args[0]
        stages = self.list_commands(ctx)
        if name not in stages and not name.startswith("-") and not ctx.resilient_parsing:
            near = difflib.get_close_matches(name, stages, n=1)
            if near:
                ctx.fail(f"No such command {name!r}; did you mean {near[0]!r}?")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Run the stage, its messages naming arguments by their options; a bad argument the library refuses
        (ArgumentError) is a usage error (exit 2) like one click refuses; a closed standard output (EPIPE)
        becomes ClosedPipe, which click does not turn into exit status 1."""
        try:
            with spelled(option_spelling):
                return super().invoke(ctx)
        except ArgumentError as exc:
            raise click.UsageError(str(exc)) from None
        except click.NoSuchOption as exc:
            own = {name for param in self.params for name in [*param.opts, *param.secondary_opts]}
            if exc.option_name not in own or exc.ctx is None:
                raise
            stage = exc.ctx.command_path.removeprefix(f"{ctx.command_path} ")
            raise click.UsageError(f"{exc.option_name} is an option of vltools itself, not of {stage}: put it "
                                   f"before the stage name (vltools {exc.option_name} {stage} ...)", exc.ctx) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise ClosedPipe from exc
            raise

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


@contextlib.contextmanager
def _terminating() -> Iterator[None]:
    """SIGTERM unwinds the run like Ctrl-C while the CLI runs; the previous handler is put back when it returns,
    so that a process calling `main` in-process (a test suite) still dies on a plain `kill` afterwards."""
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:    # not the main thread (e.g. called from a test's thread): signals cannot be handled there
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def main(argv: list[str] | None = None) -> None:
    """The `vltools` entry point: `_main` with the SIGTERM handler installed for the call only. SIGXFSZ (a write
    past `ulimit -f`) is ignored, so that such a write fails with EFBIG, reported in one line, instead of
    killing the process (Python ignores it at start-up, but a program embedding Python may not). At the process's
    exit, after the other exit handlers, what is still alive is frozen out of the interpreter's last garbage
    collections (`gc.freeze`) and left to the operating system: collecting torch's modules, classes and functions
    one by one took 0.8 s of every stage's exit (issue 50); the outputs are written and closed by then."""
    with contextlib.suppress(ValueError):    # not the main thread: the process keeps its disposition
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    atexit.unregister(gc.freeze)     # registered once, however often main runs in one process
    atexit.register(gc.freeze)
    with _terminating():
        _main(argv)


def _stdout_file() -> os.stat_result | None:
    """The status of standard output when it is a regular file (`> out.h5`), else None."""
    try:
        if sys.stdout.fileno() != 1:
            return None
        info = os.fstat(1)
    except (AttributeError, OSError, ValueError):
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _empty_stdout_file() -> tuple[int, int] | None:
    """(device, inode) of standard output when it is an empty regular file at the start of a run (the shell's
    `> out.h5`), to be passed to `_left_empty`; else None."""
    info = _stdout_file()
    return (info.st_dev, info.st_ino) if info is not None and info.st_size == 0 else None


def _stderr_is(key: tuple[int, int]) -> bool:
    """Whether standard error goes to the file (device, inode) `key` (the shell's `> log 2>&1`)."""
    try:
        errors = os.fstat(2)
    except OSError:
        return False
    return (errors.st_dev, errors.st_ino) == key


def _left_empty(empty: tuple[int, int] | None) -> str:
    """Words for a failed run's error line about the empty file standard output was redirected to (`empty` from
    `_empty_stdout_file`); "" when there is none.

    Call it only for a run whose primary output was standard output (no -o, or -o -): any other file standard
    output went to is a log the user keeps. The file is never deleted: the shell opened it, and it may be shared
    with what runs next (`{ vltools ...; echo more; } > f`, `exec > log`), so vltools cannot tell that it was
    made for this run alone. The line names it, so that it is not taken for a result; make deletes such a target
    itself under `.DELETE_ON_ERROR:`, and `-o PATH` writes atomically."""
    info = _stdout_file()
    if empty is None or info is None or (info.st_dev, info.st_ino) != empty or info.st_size or _stderr_is(empty):
        return ""
    try:
        name = os.readlink("/proc/self/fd/1")
    except OSError:  # no /proc: nothing a user would find
        return ""
    return f"; {name} (standard output) was left empty: delete it, or write with -o PATH, which leaves no file"


def _writes_stdout(args: list[str]) -> bool:
    """Whether the run `args` asked for sends its primary output to standard output, as its stage declared
    (`options.primary_output`; a stage that declared none never does): read from the arguments as typed, not
    converted, so that a run whose option values click refused is judged too; False when they do not name a
    stage or cannot be read (an unknown option, an option without its value)."""
    command: click.Command | None = cli
    name, parent, rest = "vltools", None, list(args)
    try:
        while True:
            ctx = click.Context(command, info_name=name, parent=parent)
            values, rest, _ = command.make_parser(ctx).parse_args(args=list(rest))
            if not isinstance(command, click.Group):
                break
            name, command, rest = command.resolve_command(ctx, rest) if rest else (None, None, [])
            if command is None:
                return False
            parent = ctx
    except click.ClickException:
        return False
    primary = getattr(command, "primary_output", None)
    if primary is None or not primary.stdout:
        return False
    value = values.get(primary.param)
    return primary.param is None or writes_stdout(primary, primary.param, value if isinstance(value, str) else None)


def _after_failure(empty: tuple[int, int] | None, args: list[str]) -> str:
    """`_left_empty` for a run whose primary output was standard output; any other run says nothing of the file."""
    return _left_empty(empty) if empty is not None and _writes_stdout(args) else ""


def _kept(exc: BaseException, args: list[str]) -> str:
    """What the stopped run kept for --resume (`errors.keep_note`, on the exception or, for click's Abort, the
    Ctrl-C under it) and the command that continues it, as words to append to the last line; "" for a stage that
    keeps nothing as it goes."""
    found = kept_note(exc) or (kept_note(exc.__context__) if exc.__context__ is not None else None)
    if found is None:
        return ""
    note, resumable = found
    if not resumable:
        return f"; {note}"
    again = ["vltools", *args, *([] if "--resume" in args else ["--resume"])]
    return f"; {note}: continue with {shlex.join(again)}"


def _main(argv: list[str] | None) -> None:
    """Run the CLI; user errors print one line on stderr and exit 1 (`--debug` shows the traceback).

    An OSError that escaped the stage (a file it could not read or write) is one line naming the file. A closed
    pipe on standard output (`vltools ... | head`) ends the run quietly with status 0, as `head` expects. When a
    run whose primary output was standard output fails, the error line names the empty file that standard output
    was redirected to (`_left_empty`), which is never deleted."""
    args = sys.argv[1:] if argv is None else argv
    empty = _empty_stdout_file()
    try:
        cli.main(args=args, prog_name="vltools", standalone_mode=False)
    except Terminated as exc:
        print(f"vltools: terminated{_kept(exc, args)}{_after_failure(empty, args)}", file=sys.stderr)
        sys.exit(143)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        print(f"vltools: interrupted{_kept(exc, args)}{_after_failure(empty, args)}", file=sys.stderr)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        note = _after_failure(empty, args)
        if note:
            print(f"vltools: {note.removeprefix('; ')}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except VLToolsError as exc:
        if "--debug" in args:
            log.exception("error")
        print(f"vltools: error: {exc}{_after_failure(empty, args)}", file=sys.stderr)
        sys.exit(1)
    except ClosedPipe:
        # the reader has all it wanted; send what is still buffered nowhere, so that exiting cannot fail again
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except OSError as exc:
        if "--debug" in args:
            log.exception("error")
        if exc.errno in OUTPUT_ERRNOS:
            message = str(output_error(exc.filename or "standard output", exc))
        elif exc.filename is not None:
            message = f"{exc.filename}: {exc.strerror or first_line(exc)}"
        else:
            message = first_line(exc)
        print(f"vltools: error: {message}{_after_failure(empty, args)}", file=sys.stderr)
        sys.exit(1)
