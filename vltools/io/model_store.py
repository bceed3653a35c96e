"""The local model store: names for checkpoints and ensembles, so that `match --model sgraf` works by name.

The store is a folder (`$VLTOOLS_MODELS`, default `~/.local/share/vltools/models`) holding `models.json`, an
index `{name: {"members": [absolute checkpoint paths], "added": ISO time}}`, and, for entries added with
`copy=True`, the copied checkpoints under `files/NAME/`. An entry with several members is an ensemble (its
similarities are averaged, as `match --model A --model B` does). The index is rewritten atomically.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from vltools.errors import VLToolsError, argument
from vltools.io.output import written
from vltools.io.released import RELEASED, how_to_get
from vltools.io.state import read_state

ENV = "VLTOOLS_MODELS"
DEFAULT_DIR = Path("~/.local/share/vltools/models")
INDEX = "models.json"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def store_dir() -> Path:
    """The store folder: $VLTOOLS_MODELS, else ~/.local/share/vltools/models."""
    return Path(os.environ.get(ENV) or DEFAULT_DIR).expanduser()


def index_problem(data: object) -> str | None:
    """What is wrong with a decoded index (`{name: {"members": [paths], "added": time}}`), naming the first bad
    entry, or None."""
    if not isinstance(data, dict):
        return f"must be a JSON object {{name: {{\"members\": [checkpoint paths]}}}}, found {type(data).__name__}"
    for name, entry in data.items():
        if not NAME.fullmatch(name):
            return f"has an entry with the invalid name {name!r}"
        if not isinstance(entry, dict):
            return f"entry {name!r} must be an object with \"members\", found {json.dumps(entry)[:60]}"
        members = entry.get("members")
        if not isinstance(members, list) or not members or not all(isinstance(m, str) and m for m in members):
            return f"entry {name!r}: \"members\" must be a non-empty list of checkpoint paths, found " \
                   f"{json.dumps(members)[:60]}"
        if not isinstance(entry.get("added", ""), str):
            return f"entry {name!r}: \"added\" must be a time string, found {json.dumps(entry['added'])[:60]}"
    return None


def read_index(folder: Path | None = None) -> dict[str, dict]:
    """The store's entries by name ({} when the store does not exist yet), validated (vltools.io.state)."""
    path = (folder or store_dir()) / INDEX
    if not path.exists():
        return {}
    return read_state(path, "the model store's index", index_problem,
                      f"fix that entry, or delete {path} and add the models again with `vltools models add`")


def _write_index(entries: dict[str, dict], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with written(folder / INDEX) as tmp:
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def check_name(name: str) -> None:
    """A store name: letters, digits, `.`, `_`, `-`, starting with a letter or digit, not ending in .pt."""
    if not NAME.fullmatch(name) or name.endswith((".pt", ".pth")):
        raise VLToolsError(f"{name!r}: not a valid model name; use letters, digits, '.', '_' and '-' (for example "
                           "sgraf-f30k), not a file name")


def add_model(name: str, checkpoints: Sequence[str | os.PathLike], copy: bool = False, replace: bool = False) -> dict:
    """Register `name` for `checkpoints` (an ensemble when several); with `copy` the files go into the store."""
    check_name(name)
    folder = store_dir()
    entries = read_index(folder)
    if name in entries and not replace:
        raise VLToolsError(f"{name}: already in the model store ({', '.join(entries[name]['members'])}); remove it "
                           "first or add with --replace")
    paths = [Path(c).resolve() for c in checkpoints]
    for path in paths:
        if path.is_dir():
            raise VLToolsError(f"{path}: is a directory; give checkpoint files")
        if not path.is_file():
            raise VLToolsError(f"{path}: no such checkpoint")
    if copy:
        target = folder / "files" / name
        target.mkdir(parents=True, exist_ok=True)
        copied = []
        for i, path in enumerate(paths):
            destination = target / f"{i}-{path.name}"
            with written(destination) as tmp:
                shutil.copyfile(path, tmp)
            copied.append(destination)
        paths = copied
    entry = {"members": [str(p) for p in paths],
             "added": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    _write_index({**entries, name: entry}, folder)
    return entry


def remove_model(name: str) -> dict:
    """Forget `name` (and delete the files the store copied for it); returns the removed entry."""
    folder = store_dir()
    entries = read_index(folder)
    if name not in entries:
        raise VLToolsError(f"{name}: not in the model store {folder}; registered: {_names(entries)}")
    entry = entries.pop(name)
    _write_index(entries, folder)
    copied = folder / "files" / name
    if copied.is_dir():
        shutil.rmtree(copied)
    return entry


def _names(entries: dict) -> str:
    return ", ".join(sorted(entries)) or "none (vltools models add NAME CKPT)"


def resolve_models(values: Sequence[str], option: str = "model") -> list[Path]:
    """Checkpoint paths for the values of argument `option` (its Python name, see `vltools.errors.argument`): each
    a checkpoint file or a store name (all its members); a name the store does not hold is an error saying how to
    get it (vltools.io.released)."""
    paths: list[Path] = []
    entries: dict | None = None
    for value in values:
        path = Path(value)
        if path.is_dir():
            raise VLToolsError(f"{argument(option, value)}: is a directory; give a checkpoint file or a model name "
                               "from `vltools models list`")
        if path.is_file():
            paths.append(path)
            continue
        entries = read_index() if entries is None else entries
        if value not in entries:
            raise VLToolsError(f"{argument(option, value)}: neither a checkpoint file nor a model in the store "
                               f"{store_dir()} (registered: {_names(entries)}); {how_to_get(value, option)}")
        for member in entries[value]["members"]:
            if not Path(member).is_file():
                again = f", or rerun `{RELEASED[value].download.command}`" if value in RELEASED else ""
                raise VLToolsError(f"{member}: checkpoint of the stored model {value!r} is missing; put it back, or "
                                   f"`vltools models remove {value}` and add it again{again}")
            paths.append(Path(member))
    return paths
