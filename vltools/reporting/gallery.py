"""The report's content, read from the files the stages write: one section per ranking direction and per
generated-captions file, each a list of cards (plain dicts, images named by `{"image": id}`) and sort keys.

A section holds only the sampled queries (seeded, or the ids asked for); the site writer pages them.
"""

from __future__ import annotations

import datetime
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError, input_error
from vltools.io.bounded import parse_json
from vltools.io.caption_files import CaptionFile, read_caption_file
from vltools.io.describe import describe
from vltools.io.jsonl import iter_json_lines, iter_lines
from vltools.io.proxy import read_proxy
from vltools.io.records import caption_ids, id_file_name, read_records
from vltools.text.sparse import relevance

DIRECTION_TITLES = {"i2t": "image to text", "t2i": "text to image", "i2i": "image to image"}


@dataclass
class Section:
    """One tab of the report: its cards in input order and, per sort key, one number (or None) per card."""

    id: str
    title: str
    kind: str
    source: str
    cards: list[dict]
    keys: dict[str, list[float | None]] = field(default_factory=dict)
    note: str = ""
    total: int = 0


@dataclass
class References:
    """Reference texts and ground truth: captions by id and image, pairs by id."""

    caption_text: dict[str, str] = field(default_factory=dict)
    caption_image: dict[str, str] = field(default_factory=dict)
    image_captions: dict[str, list[str]] = field(default_factory=dict)
    pair_images: dict[str, tuple[str, str]] = field(default_factory=dict)
    image_refs: CaptionFile | None = None
    pair_refs: CaptionFile | None = None


def read_references(captions: str | None, pairs: str | None) -> References:
    """Captions JSONL (ids as every stage names them) and pairs JSONL, either optional."""
    refs = References()
    if captions is not None:
        records = read_records(captions, "captions")
        for caption_id, record in zip(caption_ids(records), records, strict=True):
            refs.caption_text[caption_id] = record["caption"]
            refs.caption_image[caption_id] = record["image_id"]
            refs.image_captions.setdefault(record["image_id"], []).append(caption_id)
        refs.image_refs = read_caption_file(captions)
    if pairs is not None:
        for record in read_records(pairs, "pairs"):
            refs.pair_images[record["pair_id"]] = (record["image_a"], record["image_b"])
        refs.pair_refs = read_caption_file(pairs)
    return refs


def parse_queries(text: str | None) -> set[str] | None:
    """`--queries`: comma-separated ids, or `@FILE` with one id a line."""
    if text is None:
        return None
    if text.startswith("@"):
        lines = [line for _, line in iter_lines(text[1:])]
        return {line.strip() for line in lines}
    return {part.strip() for part in text.split(",") if part.strip()}


def choose(ids: list[str], wanted: set[str] | None, sample: int, seed: int,
           also: dict[str, str] | None = None) -> list[int]:
    """Positions of the queries to show, in input order: those in `wanted` (or whose `also` id is), else a
    seeded sample of `sample` (0 = all)."""
    if wanted is not None:
        return [n for n, item in enumerate(ids) if item in wanted or (also is not None and also.get(item) in wanted)]
    if sample <= 0 or sample >= len(ids):
        return list(range(len(ids)))
    return sorted(random.Random(seed).sample(range(len(ids)), sample))


def _first_correct(ids: list[str], correct) -> int | None:
    return next((rank for rank, item in enumerate(ids, 1) if correct(item)), None)


def _section_id(path: str, suffix: str, taken: set[str]) -> str:
    base = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(path).name.split(".")[0]) or "section"
    name, n = f"{base}-{suffix}", 2
    while name in taken:
        name, n = f"{base}-{suffix}-{n}", n + 1
    taken.add(name)
    return name


def _heatmap_index(folder: str | None) -> dict[str, Path]:
    """Heatmap files by `QUERY__RESULT` or `QUERY/RESULT` (their path without the extension)."""
    if folder is None:
        return {}
    root = Path(folder)
    if not root.is_dir():
        raise VLToolsError(f"{folder}: no such folder; give the --explain folder of match")
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix.lower() in (".png", ".jpg", ".jpeg"):
            stem = path.relative_to(root).with_suffix("").as_posix()
            found[stem] = path
    return found


def ranking_sections(path: str, refs: References, wanted: set[str] | None, sample: int, seed: int, top_k: int,
                     proxy: str | None, heatmaps: str | None, taken: set[str]) -> list[Section]:
    """One section per direction found in a rankings JSONL, with the sampled queries' top-k cards."""
    by_direction: dict[str, list[dict]] = {}
    for record in read_records(path, "rankings"):
        by_direction.setdefault(record["direction"], []).append(record)
    proxy_data = read_proxy(proxy) if proxy is not None and "i2i" in by_direction else None
    heatmap_files = _heatmap_index(heatmaps) if "i2i" in by_direction else {}
    sections = []
    for direction, records in by_direction.items():
        queries = [r["query"] for r in records]
        also = refs.caption_image if direction == "t2i" else None
        chosen = choose(queries, wanted, sample, seed, also)
        if direction in ("i2t", "t2i") and records and not refs.caption_image:
            note = "no --captions given: ground truth unknown"
        else:
            note = ""
        build = {"i2t": _i2t_card, "t2i": _t2i_card}.get(direction)
        if build is not None:
            cards = [build(records[n], refs, top_k) for n in chosen]
            keys = {"rank of the first correct answer": [card["first"] for card in cards]}
        else:
            cards = [_i2i_card(records[n], top_k, heatmap_files) for n in chosen]
            keys = {}
            if proxy_data is not None:
                _add_relevance(cards, proxy_data, proxy)
                keys["mean proxy relevance of the results"] = [
                    float(np.mean([r["relevance"] for r in card["results"]])) if card["results"] else None
                    for card in cards]
        sections.append(Section(_section_id(path, direction, taken), f"{DIRECTION_TITLES[direction]}: "
                                f"{Path(path).name}", direction, path, cards, keys, note, len(records)))
    return sections


def _i2t_card(record: dict, refs: References, top_k: int) -> dict:
    query, ids = record["query"], record["ids"]
    truth = set(refs.image_captions.get(query, ()))
    results = [{"rank": rank, "id": item, "text": refs.caption_text.get(item), "score": score, "ok": item in truth}
               for rank, (item, score) in enumerate(zip(ids[:top_k], record["scores"], strict=False), 1)]
    first = _first_correct(ids, truth.__contains__) if truth else None
    card = {"query": query, "image": {"image": query}, "first": first, "listed": len(ids), "results": results,
            "truth": [refs.caption_text[c] for c in refs.image_captions.get(query, ())], "unknown": not truth}
    if first is not None and first > top_k:
        item = ids[first - 1]
        card["first_result"] = {"rank": first, "id": item, "text": refs.caption_text.get(item),
                                "score": record["scores"][first - 1], "ok": True}
    return card


def _t2i_card(record: dict, refs: References, top_k: int) -> dict:
    query, ids = record["query"], record["ids"]
    truth = refs.caption_image.get(query)
    results = [{"rank": rank, "id": item, "image": {"image": item}, "score": score, "ok": item == truth}
               for rank, (item, score) in enumerate(zip(ids[:top_k], record["scores"], strict=False), 1)]
    first = _first_correct(ids, truth.__eq__) if truth is not None else None
    card = {"query": query, "text": refs.caption_text.get(query), "first": first, "listed": len(ids),
            "results": results, "unknown": truth is None}
    if truth is not None:
        card["truth_image"] = {"id": truth, "image": {"image": truth}}
    return card


def _i2i_card(record: dict, top_k: int, heatmaps: dict[str, Path]) -> dict:
    query = record["query"]
    results = []
    for rank, (item, score) in enumerate(zip(record["ids"][:top_k], record["scores"], strict=False), 1):
        result = {"rank": rank, "id": item, "image": {"image": item}, "score": score}
        heatmap = heatmaps.get(id_file_name([query, item], "")) or heatmaps.get(f"{query}/{item}")
        if heatmap is not None:
            result["heatmap"] = {"file": str(heatmap)}
        results.append(result)
    return {"query": query, "image": {"image": query}, "listed": len(record["ids"]), "results": results}


def _add_relevance(cards: list[dict], proxy, source: str) -> None:
    """Proxy relevance (tf-idf dot product) of each shown result to its query."""
    for card in cards:
        if not card["results"]:
            continue
        rows = proxy.rows([card["query"]], source, "query images")
        columns = proxy.rows([r["id"] for r in card["results"]], source, "result images")
        for result, value in zip(card["results"], relevance(proxy, rows, columns)[0], strict=True):
            result["relevance"] = float(value)


def read_item_scores(path: str) -> dict[str, dict[str, float]]:
    """Per-item metrics JSONL (`score caption --per-image`): {image_id or pair_id, metric: value, ...}."""
    scores: dict[str, dict[str, float]] = {}
    for number, record in iter_json_lines(path, "give the --per-image file of score caption"):
        key = "pair_id" if isinstance(record, dict) and "pair_id" in record else "image_id"
        if not isinstance(record, dict) or not isinstance(record.get(key), (str, int)):
            raise input_error(path, f"line {number}", "no 'image_id' or 'pair_id'",
                              "give the --per-image file of score caption")
        scores[str(record[key])] = {k: v for k, v in record.items() if k != key and isinstance(v, (int, float))
                                    and not isinstance(v, bool)}
    return scores


def caption_section(path: str, item_scores: str | None, refs: References, wanted: set[str] | None, sample: int,
                    seed: int, taken: set[str]) -> Section:
    """Generated captions (by image) or pair descriptions (by pair) with their references and per-item metrics."""
    generated = read_caption_file(path)
    ids = list(generated.texts)
    pairs = generated.key == "pair_id"
    references = refs.pair_refs if pairs else refs.image_refs
    metrics = read_item_scores(item_scores) if item_scores is not None else {}
    if pairs and ids and not refs.pair_images:
        raise VLToolsError(f"{path}: pair descriptions need --pairs PAIRS.jsonl to find each pair's two images")
    cards = []
    for n in choose(ids, wanted, sample, seed):
        item = ids[n]
        card: dict = {"id": item, "caption": generated.texts[item][0],
                      "refs": list(references.texts.get(item, ())) if references is not None else [],
                      "metrics": metrics.get(item, {})}
        if pairs:
            if item not in refs.pair_images:
                raise input_error(path, ", ".join(generated.where[item]), f"pair {item!r} is not in the --pairs file",
                                  "give the pairs JSONL the descriptions were generated for")
            card["images"] = [{"image": image} for image in refs.pair_images[item]]
        else:
            card["image"] = {"image": item}
        cards.append(card)
    names = list(dict.fromkeys(k for card in cards for k in card["metrics"]))
    keys = {name: [card["metrics"].get(name) for card in cards] for name in names}
    note = "" if metrics or item_scores else "no --item-scores given: cards are in input order"
    kind = "pairs" if pairs else "captions"
    title = f"{'pair descriptions' if pairs else 'captions'}: {Path(path).name}"
    return Section(_section_id(path, kind, taken), title, kind, path, cards, keys, note, len(ids))


def read_scores(path: str) -> dict:
    """A metrics JSON file (what `score` prints), for the summary."""
    try:
        value = parse_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VLToolsError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise input_error(path, None, f"not a JSON document ({exc})", "give the JSON that vltools score printed") \
            from None
    if not isinstance(value, dict):
        raise input_error(path, None, "expected a JSON object of metrics", "give the JSON that vltools score printed")
    return value


def file_summary(path: str | os.PathLike) -> dict:
    """Kind, counts and provenance of an input file through `inspect`'s describer (plain size for files that
    are not vltools kinds: scores JSON, logs, figures), with its size and modification time."""
    stat = Path(path).stat()
    try:
        summary = describe(path)
    except VLToolsError:
        summary = {"path": str(path), "kind": "file"}
    modified = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.timezone.utc)
    return {**summary, "bytes": stat.st_size, "modified": modified.isoformat(timespec="seconds")}
