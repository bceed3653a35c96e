"""Resumable JSONL outputs: finished records go to `OUT.partial` (appended, flushed per batch), and the
complete file is written atomically at the end in input order, so a killed run leaves no truncated OUT
and `--resume` skips what `OUT.partial` already holds (a last line cut by the kill is dropped)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.io.records import write_records


class PartialRecords:
    """Records keyed by `key` (e.g. image_id) collected in `OUT.partial` until `finish` writes OUT."""

    def __init__(self, output: str | os.PathLike, key: str, resume: bool) -> None:
        self.output, self.key = Path(output), key
        self.path = self.output.with_name(self.output.name + ".partial")
        self.done: dict[str, dict] = {}
        if resume and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue          # the line the interrupted run was writing
                self.done[str(record[key])] = record
        elif not resume and self.path.exists():
            raise VLToolsError(f"{self.path}: left by an interrupted run; continue it with --resume, or delete it")
        with open(self.path, "w", encoding="utf-8") as stream:     # rewrite without a cut last line
            stream.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in self.done.values())

    def add(self, records: Iterable[dict]) -> None:
        """Append finished records durably."""
        with open(self.path, "a", encoding="utf-8") as stream:
            for record in records:
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
                self.done[str(record[self.key])] = record
            stream.flush()
            os.fsync(stream.fileno())

    def finish(self, order: Sequence[str]) -> int:
        """Write OUT atomically with the records of `order` (all must be done), then drop OUT.partial."""
        count = write_records(self.output, (self.done[i] for i in order))
        self.path.unlink()
        return count
