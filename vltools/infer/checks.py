"""Plain validators of the values the stages take, shared by both interfaces: the command line's option types
(`commands/options.py`) call them at parse time and the Python API (`vltools.api`, and the option dataclasses
it builds) before any work, so that a value is refused by the same code, within the same limits, wherever it
comes from. Each takes the value and the argument's Python name and raises `vltools.errors.ArgumentError` naming
it (as the user wrote it: `top_k` from Python, `--top-k` from the command line, see `vltools.errors.argument`).

No torch, no numpy: every stage's --help is built from these.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import re
from collections.abc import Callable, Collection, Iterable

from vltools.errors import ArgumentError, shown
from vltools.io.held import held

# Upper bounds of sizes: work whose memory grows with a size must not start from a typing slip (an image side of
# 100000 asks for terabytes; a caption of a million words decodes for hours; a beam of 10**9 allocates as much)
MAX_IMAGE_SIDE = 4096        # pixels: the released detectors resize to at most 1000, R-MAC to 1024
MAX_CAPTION_WORDS = 512      # words: the field's captions and pair descriptions stay under 100
MAX_GRID_LEVEL = 32          # n of an n x n grid of regions: 32 is already 1024 crops an image
MAX_BEAM = 100               # beams per image: the field decodes with 1 to 20
MAX_SEED = 2**32 - 1         # what numpy, torch and random all accept
MAX_WORD_DIM = 1000          # dimensions of a word vector: the field's are 50 to 1000 (word2vec's GoogleNews 300)
MAX_MIXTURE_COMPONENTS = 256  # Gaussians of a Fisher vector's mixture: the field uses 16 to 256
MAX_EM_STARTS = 100          # EM starts of a mixture: each costs a whole EM run
MAX_PATH_BYTES = 4096        # Linux's PATH_MAX: a longer "path" names no file (a file's text given in its place)
# every other integer (a count, a size, an index): the largest C int, which the libraries below take (gensim's
# window and epochs, FAISS's nprobe, HDF5's sizes); a larger one is a slip that would end in their OverflowError
MAX_INTEGER = 2**31 - 1
DEVICES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")   # the devices a stage runs on (devices.resolve_device)


def _bounds(kind: str, low: float | None, high: float | None, low_open: bool = False,
            high_open: bool = False) -> str:
    """`kind` with its range in words: "a positive integer", "a finite number from 0 to 1", ..."""
    article = "an" if kind[0] in "aeiou" else "a"
    if low is None and high is None:
        return f"{article} {kind}"
    if high is None:
        if low == 0:
            return f"a positive {kind}" if low_open else f"a non-negative {kind}"
        if low == 1 and kind == "integer" and not low_open:
            return "a positive integer"
        return f"{article} {kind} {'>' if low_open else '>='} {low}"
    if low is None:
        return f"{article} {kind} {'<' if high_open else '<='} {high}"
    return (f"{article} {kind} from {low}{' (excluded)' if low_open else ''} to {high}"
            f"{' (excluded)' if high_open else ''}")


def integer(value: object, name: str, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int when it is an integer (not a bool, a float or a string) in [low, high]; without `high`,
    at most MAX_INTEGER."""
    wanted = _bounds("integer", low, high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(name, f"must be {wanted}, not {shown(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ArgumentError(name, f"must be {wanted}, not {shown(value)}")
    if high is None and value > MAX_INTEGER:
        raise ArgumentError(name, f"must be at most {MAX_INTEGER}, not {shown(value)}")
    return value


def number(value: object, name: str, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> float:
    """`value` as a float when it is a finite real number (not a bool or a string) in its range (`low` excluded
    when `low_open`, `high` when `high_open`); NaN and the infinities are refused everywhere."""
    wanted = _bounds("finite number", low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(name, f"must be {wanted}, not {shown(value)}")
    try:
        value = float(value)
    except OverflowError:     # an int or a Fraction beyond float's range, e.g. 10**400
        raise ArgumentError(name, f"must be {wanted}, not {shown(value)}") from None
    if (not math.isfinite(value) or (low is not None and (value <= low if low_open else value < low))
            or (high is not None and (value >= high if high_open else value > high))):
        raise ArgumentError(name, f"must be {wanted}, not {shown(value)}")
    return value


def optional_integer(value: object, name: str, low: int | None = None, high: int | None = None) -> int | None:
    """None, or `integer(value, ...)`: an argument whose default the stage chooses."""
    return None if value is None else integer(value, name, low, high)


def choice(value: object, name: str, choices: Collection[object]) -> object:
    """`value` when it is one of `choices`."""
    if isinstance(value, str | int | type(None)) and value in choices:
        return value
    raise ArgumentError(name, f"must be one of {', '.join(map(str, choices))}, not {shown(value)}")


def flag(value: object, name: str) -> bool:
    """`value` when it is True or False."""
    if not isinstance(value, bool):
        raise ArgumentError(name, f"must be True or False, not {shown(value)}")
    return value


def text(value: object, name: str, optional: bool = False) -> str | None:
    """`value` when it is a non-empty string (or None, when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ArgumentError(name, f"must be a non-empty string{' or None' if optional else ''}, not {shown(value)}")
    return value


def device(value: object, name: str) -> str:
    """`value` when it names a device (DEVICES): auto, cpu, cuda, cuda:K or mps; whether it is there is known only
    when torch looks (devices.resolve_device), but a misspelling (`gpu`, `cuda0`) is refused at once."""
    if not isinstance(value, str) or not DEVICES.fullmatch(value):
        raise ArgumentError(name, f"must be auto, cpu, cuda or cuda:K (K: a GPU's index), not {shown(value)}")
    return value


def path(value: object, name: str, optional: bool = False) -> str | os.PathLike | None:
    """`value` when it is a file path (a non-empty str or os.PathLike without a NUL; or None, when `optional`): an
    int would be taken for an open file descriptor, None for standard output."""
    if value is None and optional:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ArgumentError(name, f"must be a file path (str or pathlib.Path){' or None' if optional else ''}, "
                                  f"not {shown(value)}")
    if len(os.fsencode(value)) > MAX_PATH_BYTES:
        raise ArgumentError(name, f"must be a file path, not a text of {len(os.fspath(value))} characters "
                                  f"({shown(value)})")
    if "\0" in os.fsdecode(value):    # no file name holds one: the OS calls would fail with "embedded null byte"
        raise ArgumentError(name, f"must be a file path without a NUL character, not {shown(value)}")
    return value


def training_output(value: object, name: str) -> str | os.PathLike:
    """`value` when it is a file path (`path`) other than `-`: train writes its checkpoint with OUTPUT.last.pt and
    OUTPUT.log.jsonl beside it, which standard output cannot hold (`-` wrote the checkpoint there and the other
    two as files named `-.last.pt` and `-.log.jsonl`)."""
    path(value, name)
    if os.fspath(value) == "-":
        raise ArgumentError(name, "cannot be '-' (standard output): train writes a checkpoint file with OUTPUT.last.pt "
                                  "and OUTPUT.log.jsonl beside it; give a file path")
    return value


def paths(value: object, name: str, also: str = "") -> list[str | os.PathLike]:
    """One path or a non-empty list (or tuple) of paths, as a list; `also` names what else the argument takes
    (data in memory that the caller has let through), for the refusal."""
    if isinstance(value, str | os.PathLike):
        return [path(value, name)]
    if not isinstance(value, list | tuple) or not value:
        raise ArgumentError(name, f"must be {also}a file path or a non-empty list of paths, not {shown(value)}")
    return [path(item, name) for item in value]


# what each kind of data in memory (vltools.io.spooled.held) is, for the refusals of `data`
HELD = {"records": "records (a non-empty list of dicts)", "document": "a dict",
        "features": "features ({'ids': [...], 'regions': array, ...})", "embeddings": "Embeddings (from encode)"}


def data(value: object, name: str, kinds: Collection[str], optional: bool = False) -> object:
    """A file path (or None, when `optional`), or data in memory of one of `kinds` (see `vltools.io.spooled.held`:
    records, document, features, embeddings) that the reader of the file takes through a temporary file
    (`vltools.io.spooled.spooled`)."""
    if held(value) in kinds or (value is None and optional):
        return value
    if isinstance(value, str | os.PathLike):
        return path(value, name)
    given = [f"a file path{' (or None)' if optional else ''}", *(HELD[kind] for kind in kinds)]
    raise ArgumentError(name, f"must be {', '.join(given[:-1])} or {given[-1]} in memory, not {shown(value)}")


def records(value: object, name: str, optional: bool = False) -> object:
    """A file path, or records in memory: a non-empty list of dicts, or a dict (one JSON document such as COCO
    annotations)."""
    return data(value, name, ("records", "document"), optional)


def queries(value: object, name: str) -> list[str]:
    """One query (a text, or an image path) or a non-empty list (or tuple) of them, as a list of strings."""
    items = [value] if isinstance(value, str | os.PathLike) else value
    if not isinstance(items, list | tuple) or not items or not all(isinstance(item, str | os.PathLike)
                                                                     for item in items):
        raise ArgumentError(name, f"must be a query (a text or an image path) or a non-empty list of them, not "
                                  f"{shown(value)}")
    return [os.fsdecode(item) for item in items]


def integers(value: object, name: str, low: int | None = None, empty: bool = True) -> tuple[int, ...]:
    """A list (or tuple) of integers, each at least `low` (R values, top-K cut-offs), as a tuple."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or (not value and not empty):
        raise ArgumentError(name, f"must be a {'' if empty else 'non-empty '}list of integers, not {shown(value)}")
    return tuple(integer(item, name, low) for item in value)


def split(value: object, name: str, optional: bool = False) -> str | None:
    """`value` when it names a split: a non-empty string of printable characters without a slash, not `.` or `..`
    (or None, when `optional`). A split is written as given into records, file names ({split}_ims.npy) and
    messages: an empty one names nothing, one holding ESC, a newline or another control character is a name no one
    can see or type back, and one holding a path (`../x`) would write into another folder."""
    if value is None and optional:
        return None
    if (not isinstance(value, str) or not value or not value.isprintable() or "/" in value or "\\" in value
            or value in (".", "..")):
        raise ArgumentError(name, f"must be a split name (a non-empty string of printable characters, without a "
                                  f"slash{', or None' if optional else ''}), not {shown(value)}")
    return value


def _each(value: object, name: str, what: str, check: Callable[[object, str], str]) -> tuple[str, ...]:
    """A list (or tuple) of `what`, each passing `check`, as a tuple."""
    if not isinstance(value, list | tuple):
        raise ArgumentError(name, f"must be a list of {what}, not {shown(value)}")
    return tuple(check(item, name) for item in value)


def texts(value: object, name: str) -> tuple[str, ...]:
    """A list (or tuple) of non-empty strings (words to add or subtract), as a tuple."""
    return _each(value, name, "words", text)


def splits(value: object, name: str) -> tuple[str, ...]:
    """A list (or tuple) of split names (`split`), as a tuple."""
    return _each(value, name, "split names", split)


def known(given: Iterable[str], accepted: Collection[str], function: str) -> None:
    """Refuse a keyword `function` does not take, suggesting the nearest one it does (`topk`: top_k)."""
    for name in given:
        if name not in accepted:
            near = difflib.get_close_matches(name, list(accepted), n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else f"; it takes {', '.join(sorted(accepted))}"
            raise ArgumentError(name, f"is not an argument of vltools.{function}{hint}")
