"""Caption log-probability matrices on disk (`caption --logp`): images x captions log p(c | i) with ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from vltools.errors import input_error
from vltools.io.hdf5 import first_nonfinite, open_h5, read_strings, write_arrays
from vltools.io.sims import caption_image_index


@dataclass
class LogP:
    """log p(caption | image) for generated captions (rows) and images (columns), with the captions' images."""

    logp: np.ndarray
    image_ids: list[str]
    caption_index: np.ndarray


def write_logp(path: str | os.PathLike | None, logp: np.ndarray, image_ids: list[str],
               caption_image_ids: list[str], caption_ids: list[str] | None = None,
               attrs: dict[str, object] | None = None) -> None:
    """Write a `logp` HDF5 file (`/logp` n_captions x n_images, `/image_ids`, `/caption_image_ids`)."""
    logp = np.asarray(logp)
    if logp.shape != (len(caption_image_ids), len(image_ids)):
        raise ValueError(f"logp shape {logp.shape} != ({len(caption_image_ids)} captions, {len(image_ids)} images)")
    arrays: dict[str, object] = {"logp": logp, "image_ids": list(image_ids),
                                 "caption_image_ids": list(caption_image_ids)}
    if caption_ids is not None:
        arrays["caption_ids"] = list(caption_ids)
    write_arrays(path, "logp", arrays, attrs)


def read_logp(path: str | os.PathLike) -> LogP:
    """Read `/logp`, `/image_ids` and the captions' images (`/caption_image_ids` or `/caption_image_index`)."""
    with open_h5(path) as handle:
        for name in ("logp", "image_ids"):
            if name not in handle:
                raise input_error(path, None, f"no /{name} dataset", "self-retrieval needs /logp (n_captions x "
                                  "n_images), /image_ids and /caption_image_ids")
        logp = handle["logp"][()]
        image_ids = read_strings(handle, "image_ids")
        if "caption_image_ids" in handle:
            index = caption_image_index(image_ids, read_strings(handle, "caption_image_ids"), path,
                                        every_image_captioned=False)
        elif "caption_image_index" in handle:
            index = handle["caption_image_index"][()].astype(np.int64)
            if index.size and (index.min() < 0 or index.max() >= len(image_ids)):
                raise input_error(path, "/caption_image_index", f"values must be image rows 0..{len(image_ids) - 1}")
        else:
            raise input_error(path, None, "no /caption_image_ids (or /caption_image_index) dataset",
                              "say which image each generated caption was generated from")
    if logp.ndim != 2 or logp.shape != (len(index), len(image_ids)):
        raise input_error(path, "/logp", f"shape {logp.shape} does not match {len(index)} captions x "
                          f"{len(image_ids)} images")
    if (bad := first_nonfinite(logp, negative_infinity=True)) is not None:
        raise input_error(path, "/logp", f"contains NaN or +infinity (caption row {bad})",
                          "check the model that wrote it")
    return LogP(logp, image_ids, index)
