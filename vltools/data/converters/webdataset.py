"""Webdataset / img2dataset shards (uncompressed tars of `KEY.jpg` beside `KEY.txt` and/or `KEY.json` with a
"caption" field) -> captions JSONL whose image ids are the ones `extract-regions SHARD.tar` gives the images, so
that `extract-regions shard.tar`, `convert webdataset shard.tar` and `match` chain without a hand-written file.

A caption belongs to the images of the same key (webdataset's rule: the member name up to the first dot of its
file name); `.txt` is read first, else the `.json`'s "caption". An image without a caption is skipped and counted
(an error with `strict`); so is one whose name is no usable id, which extract-regions cannot extract either. Two
`.txt` (or two `.json`) members of one key (`k.txt` and `k.en.txt`, or a member appended twice) are an error
naming both: which of them is the image's caption cannot be told.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from vltools.errors import VLToolsError, argument, input_error, require_file
from vltools.io.bounded import member_bytes, parse_json
from vltools.io.progress import log
from vltools.io.records import check_converted
from vltools.io.sources import record_unique
from vltools.vision.images import list_inputs

CAPTION_EXTENSIONS = (".txt", ".json")
MAX_CAPTION_MEMBER_BYTES = 16 << 20    # a caption, or img2dataset's JSON of a caption and its metadata: kilobytes


def member_key(name: str) -> str:
    """The webdataset key of a member name: its folder and its file name up to the first dot (`a/k.jpg`: `a/k`)."""
    path = PurePosixPath(name)
    return str(path.with_name(path.name.split(".", 1)[0]))


def _text(data: bytes, shard: Path, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise input_error(shard, f"member {name}", f"not UTF-8 text ({exc.reason} at byte {exc.start + 1})",
                          "captions must be UTF-8") from None


def _json_caption(data: bytes, shard: Path, name: str) -> str | None:
    """The "caption" of a member's JSON object (None when it has none, as img2dataset writes without captions)."""
    try:
        document = parse_json(_text(data, shard, name))
    except json.JSONDecodeError as exc:
        raise input_error(shard, f"member {name}", f"not JSON ({exc.msg} at line {exc.lineno})",
                          "give img2dataset's KEY.json (an object with a \"caption\" field)") from None
    caption = document.get("caption") if isinstance(document, dict) else None
    if caption is not None and not isinstance(caption, str):
        raise input_error(shard, f"member {name}", f"its \"caption\" is {type(caption).__name__}, not text",
                          "give the caption as a JSON string")
    return caption


def shard_captions(shard: str | os.PathLike) -> dict[str, str]:
    """The caption of each key of an uncompressed tar shard (its `.txt`, else its `.json`'s "caption"; blank ones
    left out); a truncated or unreadable archive is a one-line error: its captions cannot all be known."""
    shard = require_file(shard, "no such file; give webdataset shards (.tar)", "a webdataset shard (.tar)")
    texts: dict[str, str] = {}
    jsons: dict[str, str] = {}
    members: dict[str, dict[str, str]] = {suffix: {} for suffix in CAPTION_EXTENSIONS}   # key -> its member
    try:
        with tarfile.open(shard, "r:") as tar, open(shard, "rb") as stream:
            for info in tar:
                suffix = PurePosixPath(info.name).suffix.lower()
                if info.isreg() and suffix in CAPTION_EXTENSIONS:
                    try:
                        data = member_bytes(stream, info.name, info.offset_data, info.size,
                                            MAX_CAPTION_MEMBER_BYTES)
                    except ValueError as exc:
                        raise input_error(shard, None, str(exc), "caption members (.txt, .json) hold at most "
                                          f"{MAX_CAPTION_MEMBER_BYTES >> 20} MiB; download the shard again, or "
                                          "remove the member") from None
                    key = member_key(info.name)
                    record_unique(members[suffix], key, f"member {info.name}", shard, f"member {info.name}",
                                  f"the {suffix} caption of key {key!r}", f"give each key one {suffix} caption")
                    caption = _text(data, shard, info.name) if suffix == ".txt" else _json_caption(data, shard,
                                                                                                  info.name)
                    if caption is not None and caption.strip():
                        (texts if suffix == ".txt" else jsons)[key] = caption.strip()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise input_error(shard, None, f"not a complete uncompressed tar archive ({exc})",
                          "download the shard again, or decompress it first") from None
    return {**jsons, **texts}


def read_webdataset(shards: Sequence[str | os.PathLike], split: str | None = None,
                     strict: bool = False) -> list[dict]:
    """Captions records of the images of `shards`, in archive order; image_id: the id extract-regions gives the
    image (vltools.vision.images.list_inputs), caption_id `<image id>#0`, `split` on every record when given."""
    captions = {Path(shard): shard_captions(shard) for shard in shards}
    records = []
    skipped = {"no caption": 0, "a name that is no usable id": 0}
    for item in list_inputs(shards):
        member = item.member
        if member is None:
            raise VLToolsError(f"{item.path}: not a tar archive; give webdataset shards (.tar)")
        caption = captions[item.path].get(member_key(member.name))
        reason = "a name that is no usable id" if item.problem else "no caption" if caption is None else None
        if reason is not None:
            if strict:
                raise input_error(item.path, f"member {member.name}", f"image with {reason}",
                                  "give each image a KEY.txt or KEY.json caption, or leave out "
                                  f"{argument('strict')} to skip it")
            skipped[reason] += 1
            continue
        record = {"image_id": item.image_id, "caption": caption, "caption_id": f"{item.image_id}#0"}
        if split is not None:
            record["split"] = split
        records.append(check_converted(record, "captions", item.path, f"member {member.name}"))
    for reason, count in skipped.items():
        if count:
            log.warning("skipped %d images with %s", count, reason)
    if not records:
        raise VLToolsError(f"{', '.join(map(str, shards))}: no image has a caption; give shards with KEY.txt or "
                           "KEY.json captions beside the images")
    return records
