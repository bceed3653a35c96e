"""Scenes of the synthetic world: objects with shape, colour, size and position, and controlled edits.

A scene is a list of `Obj` on a square canvas. Objects never overlap (their bounding circles keep a gap),
so every object is fully visible and its box and mask are its own. Edits change exactly one thing
(one object's colour, shape or size, a swap of two objects, a move, an added or a removed object) and
return a record of the change, from which captions of near-duplicates and pair descriptions are written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross")
COLOURS = {
    "red": (214, 39, 40),
    "orange": (245, 140, 20),
    "yellow": (232, 200, 20),
    "green": (40, 155, 60),
    "blue": (35, 80, 215),
    "purple": (140, 55, 185),
    "black": (30, 30, 30),
}
SIZES = ("small", "large")
# bounding-circle radius as a fraction of the canvas side, per size
RADIUS = {"small": (0.085, 0.105), "large": (0.155, 0.185)}
GAP = 0.03  # minimum free space between two objects' bounding circles, as a fraction of the side
# 3 x 3 grid of coarse positions, row-major from the top left
POSITIONS = ("top left", "top", "top right", "left", "middle", "right", "bottom left", "bottom", "bottom right")
EDIT_TYPES = ("colour", "shape", "size", "swap", "move", "add", "remove")


@dataclass(frozen=True)
class Obj:
    """One object: what it is and where (integer centre and bounding-circle radius in pixels)."""

    shape: str
    colour: str
    size: str
    cx: int
    cy: int
    radius: int

    @property
    def identity(self) -> tuple[str, str]:
        return (self.colour, self.shape)


@dataclass(frozen=True)
class Scene:
    """The objects of one image on a `side` x `side` canvas."""

    side: int
    objects: tuple[Obj, ...]


def position_name(obj: Obj, side: int) -> str:
    """The coarse 3 x 3 grid cell that holds the object's centre ("top left", "middle", ...)."""
    col = min(2, obj.cx * 3 // side)
    row = min(2, obj.cy * 3 // side)
    return POSITIONS[row * 3 + col]


def relation(a: Obj, b: Obj) -> str:
    """Where `a` is relative to `b` along the axis of larger displacement: left, right, above or below."""
    dx, dy = b.cx - a.cx, b.cy - a.cy
    if abs(dx) >= abs(dy):
        return "left" if dx > 0 else "right"
    return "above" if dy > 0 else "below"


def _fits(obj: Obj, others: tuple[Obj, ...] | list[Obj], side: int) -> bool:
    """Inside the canvas with a margin, and clear of every other object by the gap."""
    margin = 2
    if not (obj.radius + margin <= obj.cx <= side - obj.radius - margin
            and obj.radius + margin <= obj.cy <= side - obj.radius - margin):
        return False
    gap = GAP * side
    return all((obj.cx - o.cx) ** 2 + (obj.cy - o.cy) ** 2 > (obj.radius + o.radius + gap) ** 2 for o in others)


def _radius(rng: np.random.Generator, size: str, side: int) -> int:
    low, high = RADIUS[size]
    return int(round(rng.uniform(low, high) * side))


def _place(rng: np.random.Generator, shape: str, colour: str, size: str, others: list[Obj] | tuple[Obj, ...],
           side: int, tries: int = 60) -> Obj | None:
    """An object of the given kind at a random free position, or None when no place was found."""
    radius = _radius(rng, size, side)
    low, high = radius + 2, side - radius - 2
    for _ in range(tries):
        obj = Obj(shape, colour, size, int(rng.integers(low, high + 1)), int(rng.integers(low, high + 1)), radius)
        if _fits(obj, others, side):
            return obj
    return None


def _pick(rng: np.random.Generator, options) -> str:
    options = tuple(options)
    return options[int(rng.integers(len(options)))]


def sample_scene(rng: np.random.Generator, side: int, min_objects: int = 1, max_objects: int = 4,
                 repeat_prob: float = 0.3, unique: bool = False) -> Scene:
    """A random scene of `min_objects`..`max_objects` non-overlapping objects.

    With probability `repeat_prob` (and `unique` false) one object repeats another's colour and shape, so
    that counts ("two red circles") occur; `unique` makes every (colour, shape) distinct instead.
    """
    while True:
        count = int(rng.integers(min_objects, max_objects + 1))
        objects: list[Obj] = []
        repeat = not unique and count >= 2 and rng.random() < repeat_prob
        for index in range(count):
            if repeat and index == count - 1:
                shape, colour = objects[0].shape, objects[0].colour
            else:
                while True:
                    shape, colour = _pick(rng, SHAPES), _pick(rng, COLOURS)
                    if not (unique and any(o.identity == (colour, shape) for o in objects)):
                        break
            obj = _place(rng, shape, colour, _pick(rng, SIZES), objects, side)
            if obj is None:
                break
            objects.append(obj)
        if len(objects) == count:
            return Scene(side, tuple(objects))


def _identity_free(objects: tuple[Obj, ...], colour: str, shape: str, skip: int | None = None) -> bool:
    return all(o.identity != (colour, shape) for i, o in enumerate(objects) if i != skip)


def apply_edit(rng: np.random.Generator, scene: Scene, kind: str, touched: frozenset[int] = frozenset(),
               unique: bool = False, max_objects: int = 4) -> tuple[Scene, dict] | None:
    """Change one thing of `scene`; return the new scene and a change record, or None if `kind` cannot apply.

    Objects in `touched` (indices) are left alone, so several edits in a row describe separate objects.
    With `unique`, no edit may give two objects the same colour and shape. Object order is kept (an added
    object goes last), so object i of the old scene is object i of the new one except after "remove".
    The record holds the objects' attributes before ("a") and after ("b") the change.
    """
    objects = scene.objects
    free = [i for i in range(len(objects)) if i not in touched]
    side = scene.side
    if kind in ("colour", "shape", "size", "move", "remove") and not free:
        return None
    if kind == "colour":
        i = _pick(rng, free)
        old = objects[i]
        options = [c for c in COLOURS if c != old.colour and (not unique or _identity_free(objects, c, old.shape, i))]
        if not options:
            return None
        new = replace(old, colour=_pick(rng, options))
    elif kind == "shape":
        i = _pick(rng, free)
        old = objects[i]
        options = [s for s in SHAPES if s != old.shape and (not unique or _identity_free(objects, old.colour, s, i))]
        if not options:
            return None
        new = replace(old, shape=_pick(rng, options))
    elif kind == "size":
        i = _pick(rng, free)
        old = objects[i]
        size = "large" if old.size == "small" else "small"
        new = replace(old, size=size, radius=_radius(rng, size, side))
        if not _fits(new, objects[:i] + objects[i + 1:], side):
            return None
    elif kind == "move":
        i = _pick(rng, free)
        old = objects[i]
        others = objects[:i] + objects[i + 1:]
        where = position_name(old, side)
        for _ in range(60):
            new = replace(old, cx=int(rng.integers(old.radius + 2, side - old.radius - 1)),
                          cy=int(rng.integers(old.radius + 2, side - old.radius - 1)))
            if position_name(new, side) != where and _fits(new, others, side):
                break
        else:
            return None
    elif kind == "swap":
        pairs = [(i, j) for i in free for j in free if i < j and objects[i].identity != objects[j].identity]
        if not pairs:
            return None
        i, j = pairs[int(rng.integers(len(pairs)))]
        a, b = objects[i], objects[j]
        new_a, new_b = replace(a, cx=b.cx, cy=b.cy), replace(b, cx=a.cx, cy=a.cy)
        rest = [o for k, o in enumerate(objects) if k not in (i, j)]
        if not (_fits(new_a, rest, side) and _fits(new_b, [*rest, new_a], side)):
            return None
        edited = list(objects)
        edited[i], edited[j] = new_a, new_b
        record = {"type": "swap", "objects": [i, j], "a": [relation(a, b)], "b": [relation(new_a, new_b)],
                  "what": [_attrs(a), _attrs(b)]}
        return Scene(side, tuple(edited)), record
    elif kind == "add":
        if len(objects) >= max_objects:
            return None
        while True:
            shape, colour = _pick(rng, SHAPES), _pick(rng, COLOURS)
            if not unique or _identity_free(objects, colour, shape):
                break
        new = _place(rng, shape, colour, _pick(rng, SIZES), objects, side)
        if new is None:
            return None
        before = sum(o.identity == new.identity for o in objects)
        record = {"type": "add", "objects": [len(objects)], "what": [_attrs(new)], "a": before, "b": before + 1}
        return Scene(side, (*objects, new)), record
    elif kind == "remove":
        if len(objects) < 2:
            return None
        i = _pick(rng, free)
        old = objects[i]
        before = sum(o.identity == old.identity for o in objects)
        record = {"type": "remove", "objects": [i], "what": [_attrs(old)], "a": before, "b": before - 1}
        return Scene(side, objects[:i] + objects[i + 1:]), record
    else:
        raise ValueError(f"unknown edit type {kind!r}; use one of {', '.join(EDIT_TYPES)}")
    edited = list(objects)
    edited[i] = new
    field = {"move": "position"}.get(kind, kind)
    before = position_name(old, side) if kind == "move" else getattr(old, field)
    after = position_name(new, side) if kind == "move" else getattr(new, field)
    record = {"type": kind, "objects": [i], "what": [_attrs(old)], "a": before, "b": after}
    return Scene(side, tuple(edited)), record


def _attrs(obj: Obj) -> dict:
    return {"shape": obj.shape, "colour": obj.colour, "size": obj.size}


def scene_record(scene: Scene, boxes: list[list[int]]) -> list[dict]:
    """The objects of a scene as plain JSON-ready dicts, each with its pixel box and coarse position."""
    return [{"shape": o.shape, "colour": o.colour, "size": o.size, "center": [o.cx, o.cy], "radius": o.radius,
             "position": position_name(o, scene.side), "box": box}
            for o, box in zip(scene.objects, boxes, strict=True)]
