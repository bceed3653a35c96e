"""`vltools extract-regions` and `vltools.extract_regions`: region and global features of images."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields

from vltools.errors import CombinationError
from vltools.infer import checks
from vltools.infer.settings import COMMIT_SECONDS, RegionOptions, RunOptions, locked_part, parse_shard
from vltools.io.output import is_stdout

PathLike = str | os.PathLike
# the keywords beside the named ones: RegionOptions' and RunOptions' fields (commit_seconds is checkpoint_seconds)
KEYWORDS = {field.name for options in (RegionOptions, RunOptions) for field in fields(options)} - {"commit_seconds"}


def extract_regions(inputs: PathLike | Sequence[PathLike], output: PathLike, *, regions: str = "detector",
                    backbone: str = "resnet101", weights: str = "imagenet", device: str = "auto",
                    batch_size: int = 8, workers: int = 2, strict: bool = False, resume: bool = False,
                    checkpoint_seconds: float = COMMIT_SECONDS, shard: str | None = None,
                    **options: object) -> dict[str, int]:
    """Region features of the images of INPUTS (folders, image files, tar shards, path lists, an images JSONL or
    Hugging Face datasets) in a features HDF5 at `output` (`-`: standard output); returns {"written": n,
    "failed": n}. Every run keeps its finished images in `OUTPUT.partial/`; `resume` continues an interrupted one
    (vltools.io.checkpoint); `shard` "i/n" extracts the i-th of n runs of the images, into `output`, or as part i
    of n of a set when `output` is a folder (vltools.io.shards); under torchrun each process writes its part.
    Further keyword options are those of `vltools.infer.regions.RegionOptions` (num_regions, global_pool,
    image_size, ...) and `vltools.infer.settings.RunOptions` (precision, dtype, max_pixels, seed, ...)."""
    inputs = checks.paths(inputs, "inputs")
    checks.path(output, "output")
    checks.known(options, KEYWORDS | {"checkpoint_seconds", "shard"}, "extract_regions")
    parse_shard(shard)
    region_fields = {field.name for field in fields(RegionOptions)}
    chosen = RegionOptions(regions=regions, backbone=backbone, weights=weights,
                           **{k: v for k, v in options.items() if k in region_fields})
    run = RunOptions(device=device, batch_size=batch_size, workers=workers, strict=strict, resume=resume,
                     commit_seconds=checkpoint_seconds,
                     **{k: v for k, v in options.items() if k not in region_fields})
    if problem := chosen.problem():
        raise CombinationError(problem)
    from vltools.infer.regions import extract_regions as extract  # torch: once every argument is checked

    with locked_part(output, shard, "h5") as (target, part):
        return extract(inputs, None if is_stdout(target) else target, chosen, run, part, shard)
