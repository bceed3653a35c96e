"""Text of the synthetic world: image captions, region captions and pair difference descriptions.

Captions vary in template, word choice (synonyms), order, which objects they mention, counts and
relations, so that matching an image to its captions needs colour, shape, size, count and layout.
Every colour or shape word a caption uses belongs to an object of its scene (see `SHAPE_WORDS`,
`SIZE_WORDS`), and the five captions of an image together name every object's colour and shape.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vltools.synth.scene import Obj, Scene, position_name, relation

SHAPE_WORDS = {
    "circle": ("circle", "disc"),
    "square": ("square", "block"),
    "triangle": ("triangle",),
    "star": ("star",),
    "diamond": ("diamond", "rhombus"),
    "cross": ("cross", "plus sign"),
}
SIZE_WORDS = {"small": ("small", "little", "tiny"), "large": ("large", "big")}
RELATION_WORDS = {
    "left": ("to the left of", "left of", "on the left of"),
    "right": ("to the right of", "right of", "on the right of"),
    "above": ("above", "over"),
    "below": ("below", "under", "beneath"),
}
POSITION_WORDS = {
    "top left": ("in the top left corner", "at the top left"),
    "top": ("at the top", "near the top"),
    "top right": ("in the top right corner", "at the top right"),
    "left": ("on the left", "at the left side"),
    "middle": ("in the middle", "in the centre"),
    "right": ("on the right", "at the right side"),
    "bottom left": ("in the bottom left corner", "at the bottom left"),
    "bottom": ("at the bottom", "near the bottom"),
    "bottom right": ("in the bottom right corner", "at the bottom right"),
}
COUNT_WORDS = ("no", "one", "two", "three", "four", "five")
GENERIC = ("shapes", "objects", "things", "figures")
SIDES = (("the left image", "the right image"), ("the first image", "the second image"),
         ("image one", "image two"))
CAPTION_TYPES = ("list", "count", "relation", "position", "subset", "colours", "shapes")


def choose(rng: np.random.Generator, options) -> str:
    """One of `options`, drawn with `rng`."""
    options = tuple(options)
    return options[int(rng.integers(len(options)))]


def plural(noun: str) -> str:
    """English plural of the shape nouns used here ("cross" -> "crosses", "plus sign" -> "plus signs")."""
    return noun + "es" if noun.endswith(("s", "x", "sh", "ch")) else noun + "s"


def article(phrase: str) -> str:
    """Prefix `a` or `an`."""
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def join(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def noun_phrase(rng: np.random.Generator, obj: Obj, size: bool | None = None, det: bool = True,
                colour: bool = True) -> str:
    """"a large red circle": the size is said when `size` is true (None: at random), the colour when asked."""
    words = []
    if size or (size is None and rng.random() < 0.5):
        words.append(choose(rng, SIZE_WORDS[obj.size]))
    if colour:
        words.append(obj.colour)
    words.append(choose(rng, SHAPE_WORDS[obj.shape]))
    phrase = " ".join(words)
    return article(phrase) if det else phrase


def _groups(rng: np.random.Generator, objects: tuple[Obj, ...], key) -> list[list[Obj]]:
    """Objects grouped by `key`, groups in random order."""
    grouped: dict = {}
    for obj in objects:
        grouped.setdefault(key(obj), []).append(obj)
    groups = list(grouped.values())
    return [groups[i] for i in rng.permutation(len(groups))]


def _group_phrase(rng: np.random.Generator, group: list[Obj], size: bool | None = None) -> str:
    """"two red circles" for a repeated colour and shape, else a noun phrase for the single object."""
    if len(group) == 1:
        return noun_phrase(rng, group[0], size=size)
    return f"{COUNT_WORDS[len(group)]} {group[0].colour} {plural(choose(rng, SHAPE_WORDS[group[0].shape]))}"


def _listing(rng: np.random.Generator, scene: Scene, size: bool | None = None) -> str:
    return join([_group_phrase(rng, g, size) for g in _groups(rng, scene.objects, lambda o: o.identity)])


def referable(scene: Scene) -> list[tuple[int, bool]]:
    """(index, needs size) of objects a phrase can single out: unique colour and shape, or with the size."""
    identities = Counter(o.identity for o in scene.objects)
    full = Counter((o.size, o.colour, o.shape) for o in scene.objects)
    result = []
    for index, obj in enumerate(scene.objects):
        if identities[obj.identity] == 1:
            result.append((index, False))
        elif full[(obj.size, obj.colour, obj.shape)] == 1:
            result.append((index, True))
    return result


def _relation_phrase(rng: np.random.Generator, scene: Scene, det: bool = True) -> tuple[str, int, int] | None:
    """"a red circle left of a blue star" for a random pair of referable objects, with their indices."""
    refs = referable(scene)
    if len(refs) < 2:
        return None
    first, second = rng.choice(len(refs), size=2, replace=False)
    (i, size_i), (j, size_j) = refs[int(first)], refs[int(second)]
    a, b = scene.objects[i], scene.objects[j]
    words = choose(rng, RELATION_WORDS[relation(a, b)])
    text = (f"{noun_phrase(rng, a, size=size_i or None, det=det)} {words} "
            f"{noun_phrase(rng, b, size=size_j or None, det=det)}")
    return text, i, j


def _caption(rng: np.random.Generator, scene: Scene, kind: str) -> str | None:
    """One caption of the given template family, or None when the family does not fit the scene."""
    objects = scene.objects
    count = len(objects)
    if kind == "list":
        intro = choose(rng, ("", "there is ", "a picture of ", "an image with ", "a drawing of ", "we see "))
        return intro + _listing(rng, scene)
    if kind == "count":
        if count == 1:
            return f"{choose(rng, ('a single', 'just one', 'only one'))} {noun_phrase(rng, objects[0], det=False)}"
        head = f"{COUNT_WORDS[count]} {choose(rng, GENERIC)}"
        return choose(rng, (f"{head}: {_listing(rng, scene, size=False)}",
                            f"{_listing(rng, scene, size=False)}, {head} in all"))
    if kind == "relation":
        found = _relation_phrase(rng, scene)
        if found is None:
            return None
        text, i, j = found
        rest = [o for k, o in enumerate(objects) if k not in (i, j)]
        if rest and rng.random() < 0.5:
            text += ", with " + join([noun_phrase(rng, o) for o in rest])
        return text
    if kind == "position":
        chosen = [objects[int(k)] for k in rng.permutation(count)[: min(count, 2)]]
        parts = [f"{noun_phrase(rng, o)} {choose(rng, POSITION_WORDS[position_name(o, scene.side)])}"
                 for o in chosen]
        return join(parts)
    if kind == "subset":
        obj = objects[int(rng.integers(count))]
        if count == 1:
            return f"{noun_phrase(rng, obj, size=True)} on a plain background"
        tail = choose(rng, ("among other shapes", "and some other objects", f"with {COUNT_WORDS[count - 1]} more"))
        return f"{noun_phrase(rng, obj, size=True)} {tail}"
    if kind == "colours":
        colours = [g[0].colour for g in _groups(rng, objects, lambda o: o.colour)]
        noun = choose(rng, GENERIC) if count > 1 else choose(rng, ("shape", "object"))
        return choose(rng, (f"{join(colours)} {noun}", f"{COUNT_WORDS[count]} {noun} coloured {join(colours)}"))
    if kind == "shapes":
        parts = []
        for group in _groups(rng, objects, lambda o: o.shape):
            noun = choose(rng, SHAPE_WORDS[group[0].shape])
            parts.append(article(noun) if len(group) == 1 else f"{COUNT_WORDS[len(group)]} {plural(noun)}")
        return join(parts)
    raise ValueError(f"unknown caption type {kind!r}")


def image_captions(rng: np.random.Generator, scene: Scene, count: int = 5) -> list[str]:
    """`count` distinct captions: always one full listing first, then other template families in random order."""
    others = CAPTION_TYPES[1:]
    order = [CAPTION_TYPES[0], *(others[int(k)] for k in rng.permutation(len(others)))]
    captions: list[str] = []
    for attempt in range(50 * count):
        if len(captions) == count:
            break
        kind = order[attempt] if attempt < len(order) else choose(rng, CAPTION_TYPES)
        text = _caption(rng, scene, kind)
        if text is not None and text not in captions:
            captions.append(text)
    if len(captions) < count:
        raise RuntimeError(f"could not write {count} distinct captions for a scene of {len(scene.objects)} objects")
    return captions


def union(box_a: list[int], box_b: list[int]) -> list[int]:
    """The smallest box holding both boxes."""
    return [min(box_a[0], box_b[0]), min(box_a[1], box_b[1]), max(box_a[2], box_b[2]), max(box_a[3], box_b[3])]


def region_captions(rng: np.random.Generator, scene: Scene, boxes: list[list[int]]) -> list[tuple[str, list[int]]]:
    """(caption, box): one per object ("a large red circle") and one per pair of referable objects
    ("red circle left of blue square", the union of their boxes), as Visual Genome region descriptions."""
    regions = []
    for obj, box in zip(scene.objects, boxes, strict=True):
        det = rng.random() < 0.5
        regions.append((noun_phrase(rng, obj, size=True, det=det), box))
    refs = referable(scene)
    for p in range(len(refs)):
        for q in range(p + 1, len(refs)):
            (i, size_i), (j, size_j) = (refs[p], refs[q]) if rng.random() < 0.5 else (refs[q], refs[p])
            a, b = scene.objects[i], scene.objects[j]
            words = choose(rng, RELATION_WORDS[relation(a, b)])
            text = (f"{noun_phrase(rng, a, size=size_i or None, det=False)} {words} "
                    f"{noun_phrase(rng, b, size=size_j or None, det=False)}")
            regions.append((text, union(boxes[i], boxes[j])))
    return regions


def _difference(rng: np.random.Generator, change: dict, first: str, second: str) -> str:
    """One sentence saying how the second image differs from the first for one change record."""
    kind, what = change["type"], change["what"][0]
    shape = choose(rng, SHAPE_WORDS[what["shape"]])
    colour, a, b = what["colour"], change["a"], change["b"]
    thing = f"{colour} {shape}"
    if kind == "colour":
        return choose(rng, (f"{first} has {article(f'{a} {shape}')} while {second} has {article(f'{b} {shape}')}",
                            f"the {shape} is {a} in {first} and {b} in {second}",
                            f"the {shape} in {second} is {b} instead of {a}"))
    if kind == "shape":
        new = choose(rng, SHAPE_WORDS[b])
        return choose(rng, (f"{first} has {article(f'{colour} {shape}')} while {second} has "
                            f"{article(f'{colour} {new}')}",
                            f"the {colour} {shape} of {first} is {article(new)} in {second}",
                            f"{second} shows {article(f'{colour} {new}')} instead of {article(f'{colour} {shape}')}"))
    if kind == "size":
        more, less = ("larger", "bigger"), ("smaller",)
        return choose(rng, (f"the {thing} is {choose(rng, more if b == 'large' else less)} in {second}",
                            f"{first} has {article(f'{a} {thing}')} and {second} {article(b)} one",
                            f"the {thing} in {first} is {choose(rng, more if a == 'large' else less)} than in "
                            f"{second}"))
    if kind == "move":
        return choose(rng, (f"the {thing} is {choose(rng, POSITION_WORDS[a])} in {first} but "
                            f"{choose(rng, POSITION_WORDS[b])} in {second}",
                            f"in {second} the {thing} has moved to the {b}",
                            f"the {thing} moved from the {a} to the {b}"))
    if kind == "swap":
        other = change["what"][1]
        other_thing = f"{other['colour']} {choose(rng, SHAPE_WORDS[other['shape']])}"
        return choose(rng, (f"in {first} the {thing} is {choose(rng, RELATION_WORDS[a[0]])} the {other_thing}, "
                            f"in {second} it is {choose(rng, RELATION_WORDS[b[0]])} it",
                            f"the {thing} and the {other_thing} have swapped places, so the {thing} is now "
                            f"{choose(rng, RELATION_WORDS[b[0]])} the {other_thing}"))
    if kind in ("add", "remove"):
        more_side, less_side = (second, first) if kind == "add" else (first, second)
        options = [f"{more_side} has an extra {thing}", f"{more_side} has one more {thing}",
                   f"there is an additional {thing} in {more_side}"]
        if min(a, b) == 0:
            options.append(f"{less_side} has no {thing}")
        else:
            options.append(f"{more_side} has {COUNT_WORDS[max(a, b)]} {colour} {plural(shape)} and {less_side} "
                           f"{COUNT_WORDS[min(a, b)]}")
        return choose(rng, options)
    raise ValueError(f"unknown change type {kind!r}")


def difference_descriptions(rng: np.random.Generator, changes: list[dict], count: int) -> list[str]:
    """Up to `count` distinct descriptions of a pair, each naming every change in a random order and
    wording, like several annotators describing the same two images (Birds-to-Words)."""
    descriptions: list[str] = []
    for _ in range(10 * count):
        if len(descriptions) == count:
            break
        first, second = SIDES[int(rng.integers(len(SIDES)))]
        parts = [_difference(rng, changes[int(k)], first, second) for k in rng.permutation(len(changes))]
        text = join(parts) if rng.random() < 0.5 else "; ".join(parts)
        if text not in descriptions:
            descriptions.append(text)
    return descriptions
