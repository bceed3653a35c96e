"""Limits of image decoding, without torch: the command line shows them as option defaults (`--max-pixels`) in
--help, before any stage loads torch; `vision.images` applies them."""

DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
MAX_PIXELS_LIMIT = 2**28  # the most --max-pixels may allow: 768 MiB decoded as RGB, before any resizing
