"""The image-decoding limits shown as option defaults: the decompression-bomb threshold is Pillow's own."""

from __future__ import annotations

import subprocess
import sys

from vltools.vision.limits import DEFAULT_MAX_PIXELS


def test_default_max_pixels_is_pillows_decompression_bomb_threshold():
    code = "from PIL import Image; print(Image.MAX_IMAGE_PIXELS)"    # a fresh Pillow: no test has changed it
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert int(result.stdout) == DEFAULT_MAX_PIXELS == 89_478_485
