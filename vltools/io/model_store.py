"""The local model store: names for checkpoints and ensembles, so that `match --model sgraf` works by name.

The store is a folder (`$VLTOOLS_MODELS`, default `~/.local/share/vltools/models`) holding `models.json`, an
index `{name: {"members": [absolute checkpoint paths], "added": ISO time}}`, and, for entries added with
`copy=True`, the copied checkpoints under `files/NAME/`. An entry with several members is an ensemble (its
similarities are averaged, as `match --model A --model B` does). The index is rewritten atomically.

An OpenCLIP model is named `openclip:ARCH[:PRETRAINED_OR_FILE]` (`OpenClipSpec`): an open_clip architecture with
a pretrained tag (the architecture's default without one), a local weights file, or `random` (seeded random
weights, for tests); a weights file registered as `openclip:ARCH` or `openclip:ARCH:TAG` (`models add`) stands
for that name, so that a tag works offline once its file is registered.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vltools.errors import VLToolsError, argument
from vltools.io.output import written
from vltools.io.released import RELEASED, default_openclip_tag, how_to_get
from vltools.io.state import read_state

ENV = "VLTOOLS_MODELS"
DEFAULT_DIR = Path("~/.local/share/vltools/models")
INDEX = "models.json"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
OPENCLIP = "openclip:"
OPENCLIP_NAME = re.compile(r"openclip:[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9][A-Za-z0-9._-]*)?")
RANDOM = ("random", "none")
WEIGHTS_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


@dataclass(frozen=True)
class OpenClipSpec:
    """An OpenCLIP model: its open_clip architecture and weights, one of a pretrained `tag` (fetched by open_clip
    into its cache), a local weights `file` (with `tag`: the tag it was registered for, whose preprocessing it
    takes) or `random` (seeded random weights). `given`: the value as the user wrote it, for messages."""

    arch: str
    tag: str | None = None
    file: Path | None = None
    random: bool = False
    given: str = ""

    def __str__(self) -> str:
        return self.given or f"{OPENCLIP}{self.arch}:{'random' if self.random else self.file or self.tag}"


def is_openclip(value: object) -> bool:
    """Whether a `--model` value names an OpenCLIP model (`openclip:ARCH[:...]`)."""
    return isinstance(value, OpenClipSpec) or (isinstance(value, str | os.PathLike)
                                               and os.fspath(value).startswith(OPENCLIP))


def openclip_spec(value: str, option: str = "model", entries: dict | None = None) -> OpenClipSpec:
    """The OpenCLIP model `openclip:ARCH[:PRETRAINED_OR_FILE]` names: `random`/`none`, a weights file (an existing
    file, or a value with a path's slash or a weights suffix, which must exist), or a pretrained tag (the
    architecture's default tag, vltools.io.released, when none); a file registered in the store under the name
    (`openclip:ARCH`, `openclip:ARCH:TAG`) stands for it."""
    arch, _, weights = value[len(OPENCLIP):].partition(":")
    if not arch:
        raise VLToolsError(f"{argument(option, value)}: names no architecture; give "
                           "openclip:ARCH[:PRETRAINED_OR_FILE], e.g. openclip:ViT-B-32 or openclip:ViT-B-32:random")
    if weights in RANDOM:
        return OpenClipSpec(arch, random=True, given=value)
    if weights and (Path(weights).is_file() or "/" in weights or weights.endswith(WEIGHTS_SUFFIXES)):
        if not Path(weights).is_file():
            raise VLToolsError(f"{argument(option, value)}: no such weights file {weights}; give an existing "
                               f".pt, .bin or .safetensors file of open_clip weights for {arch}")
        return OpenClipSpec(arch, file=Path(weights), given=value)
    entries = read_index() if entries is None else entries
    tag = weights or default_openclip_tag(arch)
    name = f"{OPENCLIP}{arch}" if not weights and f"{OPENCLIP}{arch}" in entries else f"{OPENCLIP}{arch}:{tag}"
    if name not in entries:
        return OpenClipSpec(arch, tag, given=value)
    stored = Path(entries[name]["members"][0])
    if not stored.is_file():
        raise VLToolsError(f"{stored}: the weights file of the stored model {name!r} is missing; put it back, or "
                           f"`vltools models remove {name}` and add it again")
    return OpenClipSpec(arch, tag if name.count(":") == 2 else None, stored, given=value)


def store_dir() -> Path:
    """The store folder: $VLTOOLS_MODELS, else ~/.local/share/vltools/models."""
    return Path(os.environ.get(ENV) or DEFAULT_DIR).expanduser()


def index_problem(data: object) -> str | None:
    """What is wrong with a decoded index (`{name: {"members": [paths], "added": time}}`), naming the first bad
    entry, or None."""
    if not isinstance(data, dict):
        return f"must be a JSON object {{name: {{\"members\": [checkpoint paths]}}}}, found {type(data).__name__}"
    for name, entry in data.items():
        if not (NAME.fullmatch(name) or OPENCLIP_NAME.fullmatch(name)):
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
    """A store name: letters, digits, `.`, `_`, `-`, starting with a letter or digit, not ending in .pt; or an
    OpenCLIP name, `openclip:ARCH` or `openclip:ARCH:TAG`, for the weights file of that architecture or tag."""
    if OPENCLIP_NAME.fullmatch(name) and name.rpartition(":")[2] not in RANDOM:
        return
    if name.startswith(OPENCLIP):
        raise VLToolsError(f"{name!r}: not a valid OpenCLIP model name; register a weights file as openclip:ARCH or "
                           "openclip:ARCH:TAG (for example openclip:ViT-B-32:laion2b_s34b_b79k)")
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


def resolve_models(values: Sequence[str], option: str = "model") -> list[Path | OpenClipSpec]:
    """Checkpoint paths for the values of argument `option` (its Python name, see `vltools.errors.argument`): each
    a checkpoint file or a store name (all its members), or an OpenCLIP model (`openclip_spec`); a name the store
    does not hold is an error saying how to get it (vltools.io.released)."""
    paths: list[Path | OpenClipSpec] = []
    entries: dict | None = None
    for value in values:
        if is_openclip(value):
            entries = read_index() if entries is None else entries
            paths.append(openclip_spec(value, option, entries))
            continue
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
