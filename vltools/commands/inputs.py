"""The input files of a stage, checked before it runs: every input argument or option has the type `InputFile`, which
says what kinds of file it takes (HDF5, JSON lines, a checkpoint, ...). Before a stage's callback imports its
library (and torch), `check_files` reads the first bytes of each file given and refuses one of another kind in one
line, naming the swap when two inputs were given in each other's places (`match caps.jsonl feats.h5`); then
`take_stdin` does the same for standard input (`-`), and copies HDF5 from it to a temporary file, removed when the
stage ends, since HDF5 cannot be read from a pipe.

No torch, no numpy (every stage's --help is built from this module's types).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from vltools.errors import VLToolsError
from vltools.io.kinds import FOUND, LINE_KINDS, Placed, accepts, described, kind_of, peek, refuse_wrong_kinds, sniff
from vltools.io.model_store import is_openclip, resolve_models
from vltools.io.progress import log
from vltools.io.scratch import scratch_folder
from vltools.io.shards import is_part_set
from vltools.io.write_errors import output_error

STDIN = "standard input (-)"


class InputFile(click.Path):
    """The type of every input file of a stage: a path to a file of one of `kinds` (keys of vltools.io.kinds.TAKES;
    "folder" and "images" accept a folder). `-` is standard input where HDF5 is taken, and where JSON or text lines
    are when `stdin` (the stage reads them from a pipe); `names`: a value that is no file may name a stored model
    (`--model NAME`), left to the stage (a checkpoint input takes an OpenCLIP model, `openclip:ARCH[:...]`, too);
    `formats`: the vltools HDF5 files taken (features, embeddings, index, sims, proxy, logp), by the kind each
    declares (an HDF5 file that declares none is left to the stage)."""

    def __init__(self, *kinds: str, stdin: bool = False, names: bool = False, formats: tuple[str, ...] = ()) -> None:
        super().__init__(allow_dash=True)   # a folder where a file is taken: check_files says so, in one line
        self.kinds, self.stdin, self.names, self.formats = kinds, stdin, names, formats

    def takes(self) -> str:
        """What the input takes, in words: "HDF5", "JSON lines or HDF5", ..."""
        return described(self.kinds)

    def reads_stdin(self) -> bool:
        """Whether `-` (standard input) is taken: HDF5 always (spooled), JSON or text lines where the stage reads a
        pipe."""
        return "hdf5" in self.kinds or (self.stdin and self.reads_lines())

    def reads_lines(self) -> bool:
        """Whether the input is read a line at a time (JSON lines, text lines), so that a terminal can type it."""
        return any(kind in LINE_KINDS for kind in self.kinds)

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        if value == "-" and not self.reads_stdin():
            self.fail(f"standard input (-) is not read here; give {self.takes()} as a file", param, ctx)
        return super().convert(value, param, ctx)


@dataclass(frozen=True)
class Given:
    """One input file a stage was given: the parameter, the path as given, and its kind (vltools.io.kinds.FOUND)."""

    param: click.Parameter
    path: str
    found: str

    @property
    def label(self) -> str:
        return label(self.param)

    @property
    def name(self) -> str:
        return STDIN if self.path == "-" else self.path

    def placed(self) -> Placed:
        """This input as `vltools.io.kinds.refuse_wrong_kinds` checks it."""
        return Placed(self.name, self.label, self.param.type.kinds, self.found)


def label(param: click.Parameter) -> str:
    """A parameter as --help shows it: FEATS.h5|IMG_EMB.h5|SIMS.h5 (an argument), --model (an option)."""
    return max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name


def _values(params: list[click.Parameter], values: dict[str, object]) -> list[tuple[click.Parameter, str]]:
    """(parameter, path) of each input file given, in parameter order (a repeated option or an argument taking
    several files gives several)."""
    given = []
    for param in params:
        value = values.get(param.name)
        if isinstance(param.type, InputFile) and value is not None:
            given += [(param, item) for item in (value if isinstance(value, tuple | list) else (value,))]
    return given


def _refuse_wrong_kinds(given: list[Given], stage: str) -> None:
    """Refuse the first file that its parameter does not take, naming two inputs given in each other's places."""
    refuse_wrong_kinds([item.placed() for item in given], f"see `{stage} --help`")


def check_files(params: list[click.Parameter], values: dict[str, object], stage: str) -> list[Given]:
    """Check the input files (not standard input) that a stage run with `values` was given: each must be there
    (or be a stored model's name, where one is taken) and of a kind its parameter takes; two inputs swapped are
    named. Returns what was found, for `take_stdin`. `stage`: the command as typed (`vltools match`), for the hint."""
    given, dashes = [], []
    for param, path in _values(params, values):
        if path == "-":
            dashes.append(param)
        elif Path(path).is_dir() and not is_part_set(path) and not accepts(param.type.kinds, "folder"):
            raise VLToolsError(f"{path}: is a directory; give {label(param)} {param.type.takes()} file"
                               + (" or a model name" if param.type.names else ""))
        elif (param.type.names or (is_openclip(path) and "checkpoint" in param.type.kinds)) and not Path(path).exists():
            # a stored model's name or an OpenCLIP model, or the one-line error saying how to get it
            resolve_models([path], param.name)
        else:
            given.append(Given(param, path, sniff(path, folder_ok=accepts(param.type.kinds, "folder"))))
    if len(dashes) > 1:
        raise VLToolsError(f"{STDIN} is given to {' and '.join(map(label, dashes))}; it can feed "
                           "one input only, give the others as files")
    _refuse_wrong_kinds(given, stage)
    for item in given:
        _refuse_other_format(item, stage)
    return given


def _refuse_other_format(item: Given, stage: str) -> None:
    """Refuse a readable vltools HDF5 file of another kind than its parameter's `formats` (embeddings for a features
    input, a features file as an index), in one line, before torch loads (h5py is imported here, when needed)."""
    formats = item.param.type.formats
    if item.found != "hdf5" or not formats:
        return
    from vltools.io.hdf5 import hdf5_kind

    try:
        declared = hdf5_kind(item.path)
    except VLToolsError:
        return          # unreadable: the stage's reader says so, after the outputs are checked
    if declared not in ("hdf5", *formats):
        raise VLToolsError(f"{item.name}: {item.label} takes a vltools {' or '.join(formats)} file, but this is a "
                           f"vltools {declared} file; see `{stage} --help`")


def take_stdin(params: list[click.Parameter], values: dict[str, object], given: list[Given], stage: str,
               stack: contextlib.ExitStack) -> dict[str, object]:
    """`values`, with the HDF5 that standard input carries (`-`) copied to a temporary file (removed when `stack`
    closes) in its place; its kind is checked against the other inputs first. Call it after `check_files` and
    the other checks a stage makes before it starts: it waits for the stage writing into the pipe to finish."""
    dash = next((param for param, path in _values(params, values) if path == "-"), None)
    if dash is None:
        return values
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    if not dash.type.reads_lines() and stream is not None and stream.isatty():
        raise VLToolsError(f"{STDIN} is a terminal; pipe or redirect {dash.type.takes()} into it")
    piped = Given(dash, "-", kind_of(peek(stream)))
    _refuse_wrong_kinds([piped, *given], stage)
    if piped.found != "hdf5":
        if not dash.type.stdin:
            raise VLToolsError(f"{STDIN}: {piped.label} reads {FOUND[piped.found]} from a file only; save it to a "
                               "file and give its path")
        return values
    folder = stack.enter_context(scratch_folder())
    spool = folder / "stdin.h5"
    try:
        with open(spool, "wb") as copy:
            shutil.copyfileobj(stream, copy, length=1 << 20)
    except OSError as exc:
        raise output_error(f"{spool} (copy of the HDF5 on {STDIN})", exc) from exc
    log.info("read HDF5 from %s (%d bytes, copied to %s)", STDIN, spool.stat().st_size, spool)
    value = values[dash.name]
    replaced = tuple(str(spool) if item == "-" else item for item in value) if isinstance(value, tuple) \
        else str(spool)
    return {**values, dash.name: replaced}
