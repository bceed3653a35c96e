"""Resumable JSONL outputs: finished records go to `OUT.partial` (appended, flushed per batch), and the
complete file is written atomically at the end in input order, so a killed run leaves no truncated OUT
and `--resume` skips what `OUT.partial` already holds (a last line cut by the kill is dropped).

Resumption belongs to its inputs: the first line of `OUT.partial` records the options and the digest (path,
size, modification time) of each input the records depend on; `--resume` refuses a run whose options or
inputs differ, naming what changed. A partial file holding no finished record is a leftover that the next
run replaces, and a failed run removes it (`discard`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.io.jsonl import iter_json_lines, json_writer, write_json_lines
from vltools.io.provenance import input_digest
from vltools.io.records import write_records

INTERRUPTED = "left by an interrupted run; continue it with --resume, or delete it"
STATE = "resume_state"     # the key of the first line: {"resume_state": {"options": {...}, "inputs": {...}}}


def _plain(value: object) -> object:
    """`value` as it reads back from JSON (tuples become lists), so saved and current options compare equal."""
    return json.loads(json.dumps(value))


class PartialRecords:
    """Records keyed by `key` (e.g. image_id) collected in `OUT.partial` until `finish` writes OUT.

    `options` (name -> value, e.g. {"--beam": 3}) and `inputs` (name -> path of a file every record depends on,
    e.g. {"--model": CKPT}) are recorded; `resume` refuses a partial file made with other ones. Use it as a
    context manager so that a failure discards a partial file holding no finished record."""

    def __init__(self, output: str | os.PathLike, key: str, resume: bool, options: Mapping[str, object] | None = None,
                 inputs: Mapping[str, str | os.PathLike] | None = None) -> None:
        self.output, self.key, self.resume = Path(output), key, resume
        self.path = self.output.with_name(self.output.name + ".partial")
        self.state = {"options": _plain(dict(options or {})),
                      "inputs": {name: [os.path.abspath(path), input_digest([path])]
                                 for name, path in (inputs or {}).items()}}
        self.done: dict[str, dict] = {}
        if self.path.exists():
            saved, records = self._read()
            if records and not resume:
                raise VLToolsError(f"{self.path}: {INTERRUPTED}")
            if resume and records:
                self._check(saved)
            self.done = records
        with open(self.path, "w", encoding="utf-8") as stream:     # rewrite without a cut last line
            write_json_lines(stream, [{STATE: self.state}, *self.done.values()])

    def _read(self) -> tuple[dict | None, dict[str, dict]]:
        """The recorded state (None when the file has none) and the finished records of `self.path`."""
        saved: dict | None = None
        records: dict[str, dict] = {}
        for number, record in iter_json_lines(self.path, None):     # skips the line a killed run was writing
            if number == 1 and isinstance(record, dict) and STATE in record:
                saved = record[STATE]
            elif isinstance(record, dict) and self.key in record:
                records[str(record[self.key])] = record
        return saved, records

    def _check(self, saved: dict | None) -> None:
        """Refuse to resume from records made with other options or inputs, naming the first difference."""
        again = f"resume with the same options and inputs, or delete {self.path} and run without --resume"
        if not isinstance(saved, dict):
            raise VLToolsError(f"{self.path}: does not record the options and inputs of the interrupted run; "
                               "delete it and run without --resume to start over")
        old_inputs, new_inputs = saved.get("inputs") or {}, self.state["inputs"]
        for name in [*new_inputs, *(name for name in old_inputs if name not in new_inputs)]:
            old, new = old_inputs.get(name), new_inputs.get(name)
            if old is not None and new is not None and old[1] == new[1]:
                continue
            if old and new and old[0] == new[0]:
                detail = f"{name} {new[0]} changed since the interrupted run read it (size or modification time)"
            else:
                detail = (f"the interrupted run read {name} {old[0] if old else '(none)'}, this run "
                          f"{new[0] if new else '(none)'}")
            raise VLToolsError(f"{self.path}: {detail}; {again}")
        old_options, new_options = saved.get("options") or {}, self.state["options"]
        for name in [*new_options, *(name for name in old_options if name not in new_options)]:
            if old_options.get(name) != new_options.get(name):
                raise VLToolsError(f"{self.path}: the interrupted run used {name} {old_options.get(name)!r}, this "
                                   f"run {new_options.get(name)!r}; {again}")

    def __enter__(self) -> PartialRecords:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        if kind is not None:
            self.discard()

    def add(self, records: Iterable[dict]) -> None:
        """Append finished records durably."""
        with open(self.path, "a", encoding="utf-8") as stream:
            writer = json_writer(stream)
            for record in records:
                writer.write(record)
                self.done[str(record[self.key])] = record
            stream.flush()
            os.fsync(stream.fileno())

    def discard(self) -> None:
        """After a failure: remove `OUT.partial` when it holds no finished record (nothing to resume)."""
        if not self.done:
            self.path.unlink(missing_ok=True)

    def remove(self) -> None:
        """Remove `OUT.partial` and forget its records, finished or not (results refused as a whole)."""
        self.done.clear()
        self.path.unlink(missing_ok=True)

    def finish(self, order: Sequence[str]) -> int:
        """Write OUT atomically with the records of `order` (all must be done), then drop OUT.partial."""
        count = write_records(self.output, (self.done[i] for i in order))
        self.path.unlink()
        return count
