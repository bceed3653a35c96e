"""Write the report as a static folder that works from `file://` and any static host.

Layout: `index.html`, `assets/` (the page's script and style), `data/summary.js` (header, sections, sort keys),
`data/<section>/<n>.js` (page n of a section's cards), `thumbs/`, `figures/`. Data files are scripts that call
`VLR.summary(...)` / `VLR.chunk(...)`, so a page loads them with `<script>` tags, which browsers allow from
`file://` where `fetch` is refused; only the pages a reader opens are loaded, so 10k queries stay light.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from vltools.io.atomic import atomic_folder
from vltools.io.numbers import dumps
from vltools.report.boxes import Box
from vltools.report.curves import TrainingLog, draw_curves, save_figure
from vltools.report.gallery import Section
from vltools.report.thumbs import Thumbnails
from vltools.vision.images import ImageItem

ASSETS = ("index.html", "report.js", "report.css")
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
    with atomic_folder(out, force, is_report, "vltools report", "index.html and data/summary.js") as stage:
        assets = resources.files("vltools.report") / "assets"
        (stage / "assets").mkdir()
        for name in ASSETS:
            target = stage / ("index.html" if name == "index.html" else f"assets/{name}")
            target.write_bytes((assets / name).read_bytes())
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
        listed = []
        for section in sections:
            pages = [section.cards[i:i + page_size] for i in range(0, len(section.cards), page_size)]
            for number, cards in enumerate(pages):
                _script(stage / "data" / section.id / f"{number}.js", "chunk", section.id, number,
                        _resolve(cards, thumbs))
            listed.append({"id": section.id, "title": section.title, "kind": section.kind, "source": section.source,
                           "note": section.note, "total": section.total, "count": len(section.cards),
                           "page_size": page_size, "pages": len(pages), "keys": section.keys})
        summary = {"title": header.title, "provenance": header.provenance, "figures": figures,
                   "scores": [{"name": name, "values": values} for name, values in header.scores],
                   "inputs": header.inputs, "sections": listed}
        _script(stage / "data" / "summary.js", "summary", summary)
    return {"cards": sum(len(s.cards) for s in sections), "thumbnails": len(thumbs.made) - thumbs.failed,
            "broken": thumbs.failed}
