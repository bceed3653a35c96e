"""Global image vectors from a last-stage feature map: average pooling, R-MAC, and ten-crop averaging."""

from __future__ import annotations

import torch
import torch.nn.functional as F

RMAC_LEVELS = 3
RMAC_OVERLAP = 0.4
RMAC_MAX_EXTRA = 6  # at most this many extra regions along the long side at the coarsest level
# how region starts are placed: "floor" as Tolias et al.'s rmac_regionvec_act.m (since issue 23), "round" the grid
# vltools used before (starts rounded to the nearest cell, a lone region centred, a level never skipped), which
# R-MAC checkpoints trained then were trained on
RMAC_GRIDS = ("floor", "round")


def average(featmaps: torch.Tensor) -> torch.Tensor:
    """(B, D, h, w) -> (B, D) mean over all cells."""
    return featmaps.float().mean(dim=(2, 3))


def _starts(length: int, size: int, count: int, grid: str = "floor") -> list[int]:
    """`count` windows of `size` over `length`, first at 0 and last ending at `length`: start i is
    floor(i (length - size) / (count - 1)), the reference code's floor(wl2 + i b) - wl2 with the integer wl2
    (computed exactly here, in integers); the "round" grid rounds i (length - size) / (count - 1) half up instead
    and centres a lone window."""
    if count == 1:
        return [(length - size) // 2 if grid == "round" else 0]
    if grid == "round":
        return [(2 * i * (length - size) + count - 1) // (2 * (count - 1)) for i in range(count)]
    return [i * (length - size) // (count - 1) for i in range(count)]


def rmac_regions(h: int, w: int, levels: int = RMAC_LEVELS, grid: str = "floor") -> list[tuple[int, int, int]]:
    """Tolias et al. (2016) R-MAC regions of an h x w map as (y, x, size), as their rmac_regionvec_act.m defines
    them: at level l, square regions of side floor(2 min(h, w) / (l + 1)), l per side along the short side and
    l + m along the long side, m chosen so that consecutive level-1 regions overlap as close to 40% as possible;
    starts spread by a step b = (side - size) / (count - 1) and floored. A level whose side is 0 cells (maps one
    cell wide) has no region, as in the reference. `grid` "round" gives the regions of vltools before issue 23
    (see RMAC_GRIDS): starts rounded, and a 0-cell level kept as regions of one cell."""
    if grid not in RMAC_GRIDS:
        raise ValueError(f"grid must be one of {RMAC_GRIDS}, not {grid!r}")
    short, long = min(h, w), max(h, w)
    extra = 0
    if long > short:
        overlaps = [(short - (long - short) / m) / short for m in range(1, RMAC_MAX_EXTRA + 1)]
        extra = 1 + min(range(len(overlaps)), key=lambda i: abs(overlaps[i] - RMAC_OVERLAP))
    regions = []
    for level in range(1, levels + 1):
        size = (2 * short) // (level + 1)
        if size < 1 and grid == "floor":
            continue
        size = max(size, 1)
        along_h = _starts(h, size, level + (extra if h > w else 0), grid)
        along_w = _starts(w, size, level + (extra if w > h else 0), grid)
        regions += [(y, x, size) for y in along_h for x in along_w]
    return regions


def rmac(featmap: torch.Tensor, levels: int = RMAC_LEVELS) -> torch.Tensor:
    """(D, h, w) -> (D,): each region max-pooled and l2-normalised, summed, l2-normalised (no whitening)."""
    featmap = featmap.float()
    total = torch.zeros(featmap.shape[0], device=featmap.device)
    for y, x, size in rmac_regions(featmap.shape[1], featmap.shape[2], levels):
        total += F.normalize(featmap[:, y:y + size, x:x + size].amax(dim=(1, 2)), dim=0)
    return F.normalize(total, dim=0)


def ten_crop_average(crop_featmaps: torch.Tensor, crops: int = 10) -> torch.Tensor:
    """(B * crops, D, h, w), the crops of each image consecutive -> (B, D): the average-pooled crops averaged."""
    pooled = average(crop_featmaps)
    return pooled.view(-1, crops, pooled.shape[1]).mean(dim=1)


def rmac_region_vectors(featmaps: torch.Tensor, levels: int = RMAC_LEVELS, grid: str = "floor") -> torch.Tensor:
    """(B, D, h, w) -> (B, R, D): every R-MAC region of `rmac_regions` (on `grid`) max-pooled and l2-normalised
    (differentiable, for models that whiten regions before summing them)."""
    regions = [featmaps[:, :, y:y + size, x:x + size].amax(dim=(2, 3))
               for y, x, size in rmac_regions(featmaps.shape[2], featmaps.shape[3], levels, grid)]
    return F.normalize(torch.stack(regions, dim=1), dim=2)
