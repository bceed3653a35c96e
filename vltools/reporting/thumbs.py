"""Thumbnails for the report: each image made once with Pillow, saved as JPEG under the report folder."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vltools.io.progress import log
from vltools.reporting.boxes import Box, draw_boxes
from vltools.vision.images import BadImage, ImageItem, load_rgb


class Thumbnails:
    """Maps image ids (or files, for heatmaps) to JPEGs in `folder`, made on first use and named by a counter,
    so ids with any characters give safe relative paths."""

    def __init__(self, root: Path, images: list[ImageItem], size: int,
                 boxes: dict[str, list[Box]] | None = None) -> None:
        self.root, self.size = root, size
        self.items = {item.image_id: item for item in images}
        self.boxes = boxes or {}   # drawn on the image's thumbnail (vltools.reporting.boxes)
        self.made: dict[tuple[Path, object, int, tuple[Box, ...]], dict] = {}
        self.failed = 0

    def image(self, image_id: str) -> dict:
        """`{"src": relative path}` of the id's thumbnail, or `{"missing": reason}`."""
        item = self.items.get(image_id)
        if item is None:
            return {"missing": "not in the --images lists"}
        return self.file(item, self.size, self.boxes.get(image_id, []))

    def file(self, source: Path | ImageItem, size: int, boxes: list[Box] = ()) -> dict:
        """Thumbnail of an image file (or an item: a file or a tar member) with the longer side at most `size`
        pixels and `boxes` drawn on it (made once per file, size and boxes)."""
        item = source if isinstance(source, ImageItem) else ImageItem(str(source), Path(source))
        key = (item.path, item.member, size, tuple(boxes))
        if key not in self.made:
            self.made[key] = self._make(item, size, len(self.made), list(boxes))
        return self.made[key]

    def _make(self, item: ImageItem, size: int, number: int, boxes: list[Box]) -> dict:
        path = item.path
        if not path.is_file():
            self.failed += 1
            log.warning("report: %s: no such image file; its cards show the reason instead", path)
            return {"missing": f"no such file {path}"}
        try:
            image, (_, original_width) = load_rgb(item, plan=lambda h, w: (min(h, size), min(w, size)))
        except BadImage as exc:
            self.failed += 1
            where = f"{path}: member {item.member.name}" if item.member else path
            log.warning("report: %s: %s; its cards show the reason instead", where, exc)
            return {"missing": str(exc)}
        image.thumbnail((size, size), Image.Resampling.LANCZOS)
        if boxes:
            draw_boxes(image, boxes, image.width / original_width)
        relative = Path("thumbs") / str(number // 1000) / f"{number}.jpg"
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        image.save(target, format="JPEG", quality=88)
        return {"src": relative.as_posix(), "w": image.width, "h": image.height}
