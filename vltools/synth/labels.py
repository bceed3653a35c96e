"""The synthetic world's own labels of each object: its shape, colour, size and position (`vltools synth-backbone`
trains a backbone to name them from the object's box).

Every object has exactly one label of each attribute, four in all; a label is the word the captions use ("star",
"red", "large", "top left"), and no word names two attributes. A horizontal flip of an image keeps every shape,
colour and size (all six shapes are left-right symmetric) and mirrors the positions (`mirrored`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vltools.synth.scene import COLOURS, POSITIONS, SHAPES, SIZES

ATTRIBUTES: dict[str, tuple[str, ...]] = {"shape": SHAPES, "colour": tuple(COLOURS), "size": SIZES,
                                          "position": POSITIONS}
LABELS: tuple[str, ...] = tuple(value for values in ATTRIBUTES.values() for value in values)
INDEX = {label: i for i, label in enumerate(LABELS)}


def mirrored(position: str) -> str:
    """The position of an object after a horizontal flip of its image ("top left" -> "top right")."""
    row, col = divmod(POSITIONS.index(position), 3)
    return POSITIONS[row * 3 + 2 - col]


def object_targets(objects: Sequence[dict], flipped: bool = False) -> np.ndarray:
    """Multi-hot targets [len(objects), len(LABELS)] (float32) of the objects of an `images.jsonl` record, as they
    are in the image flipped horizontally when `flipped`."""
    targets = np.zeros((len(objects), len(LABELS)), dtype=np.float32)
    for row, obj in enumerate(objects):
        position = mirrored(obj["position"]) if flipped else obj["position"]
        for label in (obj["shape"], obj["colour"], obj["size"], position):
            targets[row, INDEX[label]] = 1.0
    return targets


def attribute_columns() -> dict[str, list[int]]:
    """The columns of LABELS that each attribute owns."""
    return {name: [INDEX[value] for value in values] for name, values in ATTRIBUTES.items()}
