"""Flickr8k / Flickr30k token files (`name.jpg#k<TAB>caption`) with their split lists -> captions JSONL."""

from __future__ import annotations

import os

from vltools.errors import input_error
from vltools.io.progress import log
from vltools.io.records import check_converted
from vltools.io.sources import UNASSIGNED, SplitFiles, numbered_lines, record_unique, split_assignments


def read_flickr_tokens(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """(image name, caption id `name#k`, caption) of each line of a token file, in file order."""
    entries = []
    seen: dict[str, str] = {}
    for number, text in numbered_lines(path):
        if not text.strip():
            continue
        where = f"line {number}"
        caption_id, tab, caption = text.partition("\t")
        name, hash_mark, k = caption_id.rpartition("#")
        if not tab or not hash_mark or not name or not k.isdigit():
            raise input_error(path, where, f"expected 'NAME.jpg#K<TAB>caption', found {text[:60]!r}",
                              "give a Flickr8k / Flickr30k token file")
        caption = caption.strip()
        if not caption:
            raise input_error(path, where, f"empty caption for {caption_id}", "fix or remove that line")
        record_unique(seen, caption_id, f"line {number}", path, where, f"caption id {caption_id!r}",
                      "caption ids must be unique")
        check_converted({"image_id": name, "caption": caption, "caption_id": caption_id}, "captions", path, where)
        entries.append((name, caption_id, caption))
    if not entries:
        raise input_error(path, None, "empty file: no captions", "give a Flickr token file")
    return entries


def read_flickr(path: str | os.PathLike, split_files: SplitFiles | None = None,
                drop_unassigned: bool = False) -> list[dict]:
    """Captions records of a token file in file order; with split lists, each image gets the split of the list
    naming it, else "unassigned" (or is dropped with `drop_unassigned`). Listed images without captions are logged."""
    assignment = split_assignments(split_files or {})
    entries = read_flickr_tokens(path)
    records = []
    unassigned: set[str] = set()
    for name, caption_id, caption in entries:
        record = {"image_id": name, "caption": caption, "caption_id": caption_id}
        if split_files:
            record["split"] = assignment.get(name, UNASSIGNED)
            if name not in assignment:
                unassigned.add(name)
                if drop_unassigned:
                    continue
        records.append(record)
    missing = set(assignment) - {name for name, _, _ in entries}
    if missing:
        log.warning("%s: %d listed images have no captions (e.g. %s)", path, len(missing), sorted(missing)[0])
    if unassigned:
        log.info("%s: %d images are in no split list (%s)", path, len(unassigned),
                 "dropped" if drop_unassigned else f"split '{UNASSIGNED}'")
    if not records:
        raise input_error(path, None, "no captions left after dropping unassigned images", "check the split lists")
    return records


def convert_flickr(tokens: str | os.PathLike, train: str | os.PathLike | None = None,
                   val: str | os.PathLike | None = None, test: str | os.PathLike | None = None,
                   drop_unassigned: bool = False) -> list[dict]:
    """`vltools convert flickr TOKENS --train LIST --val LIST --test LIST`, and `vltools.convert("flickr", TOKENS,
    train=LIST, ...)` with the same keywords: the records of `read_flickr` with the lists given."""
    lists = {split: path for split, path in (("train", train), ("val", val), ("test", test)) if path is not None}
    return read_flickr(tokens, lists, drop_unassigned)
