"""Write the report as a static folder that works from `file://` and any static host.

Layout: `index.html` (the header and each section's first page of cards as plain HTML, readable without
JavaScript: `page.py`), `assets/` (the page's script and style), `data/summary.js` (header, sections, sort keys),
`data/<section>/<n>.js` (page n of a section's cards), `thumbs/`, `figures/`. Data files are scripts that call
`VLR.summary(...)` / `VLR.chunk(...)`, so a page loads them with `<script>` tags, which browsers allow from
`file://` where `fetch` is refused; only the pages a reader opens are loaded, so 10k queries stay light.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from vltools.errors import ArgumentError, VLToolsError, argument
from vltools.io.kinds import Placed, refuse_wrong_kinds, sniff
from vltools.io.numbers import clean_numbers, dumps
from vltools.io.output import written_folder
from vltools.io.progress import log
from vltools.io.provenance import provenance
from vltools.reporting.boxes import Box, read_boxes
from vltools.reporting.curves import TrainingLog, draw_curves, read_training_log, save_figure
from vltools.reporting.gallery import (
    Section,
    caption_section,
    file_summary,
    parse_queries,
    ranking_sections,
    read_references,
    read_scores,
)
from vltools.reporting.page import index_html
from vltools.reporting.thumbs import Thumbnails
from vltools.vision.images import ImageItem, list_inputs

ASSETS = ("report.js", "report.css")
HEATMAP_SIZE = 480


@dataclass
class Header:
    """What the top of the report shows: title, scores, figures, training curves, inputs and how it was made."""

    title: str
    scores: list[tuple[str, dict]] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    logs: list[TrainingLog] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)


def is_report(folder: Path) -> bool:
    """Whether a folder holds an earlier report (what --force may replace)."""
    summary = folder / "data" / "summary.js"
    return (folder / "index.html").is_file() and summary.is_file() and \
        summary.read_text(encoding="utf-8", errors="replace").startswith("VLR.summary(")


def _resolve(value: object, thumbs: Thumbnails) -> object:
    """Replace `{"image": id}` by the id's thumbnail and `{"file": path}` (heatmaps) by a copy in the report."""
    if isinstance(value, dict):
        if set(value) == {"image"} and isinstance(value["image"], str):
            return {"id": value["image"], **thumbs.image(value["image"])}
        if set(value) == {"file"}:
            return thumbs.file(Path(value["file"]), HEATMAP_SIZE)
        return {key: _resolve(item, thumbs) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, thumbs) for item in value]
    return value


def _script(path: Path, call: str, *args: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"VLR.{call}({', '.join(dumps(a, ensure_ascii=True) for a in args)});\n", encoding="utf-8")


def write_report(out: str | Path, header: Header, sections: list[Section], images: list[ImageItem],
                 thumb_size: int, page_size: int, force: bool,
                 boxes: dict[str, list[Box]] | None = None) -> dict[str, int]:
    """Write the whole folder atomically; return counts (cards, thumbnails, broken images)."""
    with written_folder(out, force, is_report, "vltools report", "index.html and data/summary.js") as stage:
        assets = resources.files("vltools.reporting") / "assets"
        (stage / "assets").mkdir()
        for name in ASSETS:
            (stage / "assets" / name).write_bytes((assets / name).read_bytes())
        figures = []
        if header.logs:
            (stage / "figures").mkdir(exist_ok=True)
            metrics = list(dict.fromkeys(m for run in header.logs for m in run.metric_names()[:1]))
            save_figure(draw_curves(header.logs, metrics), stage / "figures" / "training.png")
            figures.append({"src": "figures/training.png", "title": "training curves: "
                            + ", ".join(run.label for run in header.logs)})
        for n, figure in enumerate(header.figures):
            (stage / "figures").mkdir(exist_ok=True)
            name = f"figures/{n}-{''.join(c if c.isalnum() or c in '.-_' else '_' for c in figure.name)}"
            shutil.copyfile(figure, stage / name)
            figures.append({"src": name, "title": figure.name})
        thumbs = Thumbnails(stage, images, thumb_size, boxes)
        listed, first_cards = [], {}
        for section in sections:
            pages = [section.cards[i:i + page_size] for i in range(0, len(section.cards), page_size)]
            for number, cards in enumerate(pages):
                resolved = _resolve(cards, thumbs)
                first_cards.setdefault(section.id, resolved)
                _script(stage / "data" / section.id / f"{number}.js", "chunk", section.id, number, resolved)
            listed.append({"id": section.id, "title": section.title, "kind": section.kind, "source": section.source,
                           "note": section.note, "total": section.total, "count": len(section.cards),
                           "page_size": page_size, "pages": len(pages), "keys": section.keys})
        summary = {"title": header.title, "provenance": header.provenance, "figures": figures,
                   "scores": [{"name": name, "values": values} for name, values in header.scores],
                   "inputs": header.inputs, "sections": listed}
        _script(stage / "data" / "summary.js", "summary", summary)
        page = index_html(clean_numbers(summary), clean_numbers(first_cards))
        (stage / "index.html").write_text(page, encoding="utf-8")
    return {"cards": sum(len(s.cards) for s in sections), "thumbnails": len(thumbs.made) - thumbs.failed,
            "broken": thumbs.failed}


@dataclass
class ReportInputs:
    """The files a report shows (`vltools report`'s options by their Python names): rankings, generated captions
    with their per-item scores (same positions), where the images are, references, metrics JSON, the proxy and
    heatmaps beside i2i results, training logs, figures, and the features whose boxes are drawn."""

    rankings: Sequence[str | os.PathLike] = ()
    generated: Sequence[str | os.PathLike] = ()
    item_scores: Sequence[str | os.PathLike] = ()
    images: Sequence[str | os.PathLike] = ()
    captions: str | os.PathLike | None = None
    pairs: str | os.PathLike | None = None
    scores: Sequence[str | os.PathLike] = ()
    proxy: str | os.PathLike | None = None
    heatmaps: str | os.PathLike | None = None
    logs: Sequence[str | os.PathLike] = ()
    figures: Sequence[str | os.PathLike] = ()
    boxes: str | os.PathLike | None = None


def build_report(out: str | os.PathLike, inputs: ReportInputs, queries: str | None = None, sample: int = 100,
                 seed: int = 0, top_k: int = 5, page_size: int = 50, thumb_size: int = 160,
                 title: str = "vltools report", force: bool = False, max_boxes: int = 10) -> dict[str, int]:
    """Write the report folder OUT from `inputs` (what `vltools report` and `vltools.build_report` do): `sample`
    queries per section drawn with `seed` (0: all) or the `queries` ids (comma-separated or @FILE); returns the
    counts (cards, thumbnails, broken)."""
    given = inputs
    if len(given.item_scores) > len(given.generated):
        raise ArgumentError("item_scores", f"takes at most one file per {argument('generated')} file, in the same "
                                           "order")
    if not (given.rankings or given.generated or given.scores or given.logs or given.figures):
        raise ArgumentError("rankings", f"or {argument('generated')}, {argument('scores')}, {argument('logs')} or "
                                        f"{argument('figures')} must be given: nothing to show")
    refuse_wrong_kinds([Placed(str(path), argument("figures"), ("image",), sniff(path)) for path in given.figures],
                       "a figure is shown as an image (e.g. score semantic --plot FILE.png)")
    wanted = parse_queries(queries)
    refs = read_references(given.captions, given.pairs)
    taken: set[str] = set()
    sections = []
    for path in given.rankings:
        sections += ranking_sections(path, refs, wanted, sample, seed, top_k, given.proxy, given.heatmaps, taken)
    for n, path in enumerate(given.generated):
        sections.append(caption_section(path, given.item_scores[n] if n < len(given.item_scores) else None, refs,
                                        wanted, sample, seed, taken))
    if wanted is not None and sections and not any(s.cards for s in sections):
        raise VLToolsError(f"{argument('queries')}: none of the {len(wanted)} ids is a query or item of the given "
                           "files; check the ids")
    items = list_inputs(given.images) if given.images else []
    files = [*given.rankings, *given.generated, *given.item_scores, *given.images,
             *(p for p in (given.captions, given.pairs, given.proxy) if p), *given.scores, *given.logs]
    header = Header(title, [(path, read_scores(path)) for path in given.scores], [Path(f) for f in given.figures],
                    [read_training_log(path) for path in given.logs],
                    [file_summary(path) for path in files if Path(path).is_file()], provenance())
    boxes = read_boxes(given.boxes, [item.image_id for item in items], max_boxes) if given.boxes else None
    counts = write_report(out, header, sections, items, thumb_size, page_size, force, boxes)
    if items and any(section.cards for section in sections) and not counts["thumbnails"] + counts["broken"]:
        log.warning("report: none of the %d images of %s is shown by the report's cards, so it has no thumbnail; "
                    "give the images the rankings and captions are of", len(items), ", ".join(map(str, given.images)))
    log.info("wrote %s/index.html: %d sections, %d cards, %d thumbnails%s", out, len(sections), counts["cards"],
             counts["thumbnails"], f", {counts['broken']} images unreadable" if counts["broken"] else "")
    return counts
