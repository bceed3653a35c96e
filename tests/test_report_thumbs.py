"""Report thumbnails: made once per file, bounded size, relative paths, reasons instead of broken images."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vltools.reporting.thumbs import Thumbnails
from vltools.vision.images import ImageItem


def test_thumbnails_are_made_once_small_and_relative(tmp_path):
    source = tmp_path / "big.png"
    Image.new("RGB", (400, 200), (200, 30, 30)).save(source)
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    site = tmp_path / "site"
    thumbs = Thumbnails(site, [ImageItem("big", source), ImageItem("same", source),
                               ImageItem("broken", tmp_path / "broken.jpg"), ImageItem("gone", tmp_path / "no.png")],
                        size=100)
    first = thumbs.image("big")
    assert first == thumbs.image("big") == thumbs.image("same")  # one file for one image, however often shown
    assert first["src"] == "thumbs/0/0.jpg" and (first["w"], first["h"]) == (100, 50)
    with Image.open(site / first["src"]) as image:
        assert image.size == (100, 50) and image.format == "JPEG"
        red, green, _ = image.convert("RGB").getpixel((50, 25))
        assert red > 150 and green < 80
    assert "not an image file" in thumbs.image("broken")["missing"]
    assert "no such file" in thumbs.image("gone")["missing"]
    assert thumbs.image("unlisted") == {"missing": "not in the --images lists"}
    assert thumbs.failed == 2
    assert thumbs.file(Path(source), 300)["src"] == "thumbs/0/3.jpg"  # a larger copy (heatmaps) is its own file
    assert sorted(p.name for p in (site / "thumbs" / "0").iterdir()) == ["0.jpg", "3.jpg"]
