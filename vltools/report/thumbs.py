"""Thumbnails for the report: each image made once with Pillow, saved as JPEG under the report folder."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vltools.io.progress import log
from vltools.vision.images import BadImage, ImageItem, load_rgb


class Thumbnails:
    """Maps image ids (or files, for heatmaps) to JPEGs in `folder`, made on first use and named by a counter,
    so ids with any characters give safe relative paths."""

    def __init__(self, root: Path, images: list[ImageItem], size: int) -> None:
        self.root, self.size = root, size
        self.paths = {item.image_id: item.path for item in images}
        self.made: dict[tuple[Path, int], dict] = {}
        self.failed = 0

    def image(self, image_id: str) -> dict:
        """`{"src": relative path}` of the id's thumbnail, or `{"missing": reason}`."""
        path = self.paths.get(image_id)
        if path is None:
            return {"missing": "not in the --images lists"}
        return self.file(path, self.size)

    def file(self, path: Path, size: int) -> dict:
        """Thumbnail of an image file with the longer side at most `size` pixels (made once per file and size)."""
        key = (Path(path), size)
        if key not in self.made:
            self.made[key] = self._make(Path(path), size, len(self.made))
        return self.made[key]

    def _make(self, path: Path, size: int, number: int) -> dict:
        if not path.is_file():
            self.failed += 1
            log.warning("report: %s: no such image file; its cards show the reason instead", path)
            return {"missing": f"no such file {path}"}
        try:
            image, _ = load_rgb(path, plan=lambda h, w: (min(h, size), min(w, size)))
        except BadImage as exc:
            self.failed += 1
            log.warning("report: %s: %s; its cards show the reason instead", path, exc)
            return {"missing": str(exc)}
        image.thumbnail((size, size), Image.Resampling.LANCZOS)
        relative = Path("thumbs") / str(number // 1000) / f"{number}.jpg"
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        image.save(target, format="JPEG", quality=88)
        return {"src": relative.as_posix(), "w": image.width, "h": image.height}
