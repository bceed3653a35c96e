import re

import numpy as np
import pytest

from vltools.synth.grammar import (
    article,
    difference_descriptions,
    image_captions,
    join,
    plural,
    referable,
    region_captions,
    union,
)
from vltools.synth.scene import COLOURS, EDIT_TYPES, Obj, Scene, apply_edit, sample_scene

# The words a caption may use for each shape (the test's own statement of the grammar's synonyms).
SHAPE_NAMES = {"circle": ("circle", "disc"), "square": ("square", "block"), "triangle": ("triangle",),
               "star": ("star",), "diamond": ("diamond", "rhombus"), "cross": ("cross", "plus sign")}


def shapes_named(text: str) -> set[str]:
    return {shape for shape, words in SHAPE_NAMES.items()
            if any(re.search(rf"\b{word}(e?s)?\b", text) for word in words)}


def colours_named(text: str) -> set[str]:
    return {colour for colour in COLOURS if re.search(rf"\b{colour}\b", text)}


def scenes(count=150, **kwargs):
    return [sample_scene(np.random.default_rng([21, k]), 96, **kwargs) for k in range(count)]


def test_word_helpers():
    assert [plural(w) for w in ("circle", "cross", "plus sign", "disc")] == ["circles", "crosses", "plus signs",
                                                                           "discs"]
    assert article("orange star") == "an orange star" and article("red star") == "a red star"
    assert join(["a"]) == "a" and join(["a", "b"]) == "a and b" and join(["a", "b", "c"]) == "a, b and c"
    assert union([1, 2, 5, 6], [3, 0, 4, 9]) == [1, 0, 5, 9]


def test_five_distinct_captions_that_name_only_and_all_of_the_scene():
    families = set()
    for k, scene in enumerate(scenes()):
        captions = image_captions(np.random.default_rng([1, k]), scene)
        assert len(captions) == 5 and len(set(captions)) == 5
        colours = {o.colour for o in scene.objects}
        shapes = {o.shape for o in scene.objects}
        for text in captions:
            assert colours_named(text) <= colours, (text, colours)
            assert shapes_named(text) <= shapes, (text, shapes)
            assert text == text.strip() and "  " not in text
        assert set().union(*map(colours_named, captions)) == colours
        assert set().union(*map(shapes_named, captions)) == shapes
        # the first caption lists every object
        assert colours_named(captions[0]) == colours and shapes_named(captions[0]) == shapes
        families.update(captions)
    assert len(families) > 0.9 * 5 * 150  # captions are varied across images too


def test_counts_are_said_for_repeated_objects():
    counted = 0
    for k, scene in enumerate(scenes()):
        identities = [o.identity for o in scene.objects]
        repeated = [i for i in set(identities) if identities.count(i) == 2]
        if not repeated:
            continue
        colour, shape = repeated[0]
        first = image_captions(np.random.default_rng([1, k]), scene)[0]
        pattern = rf"two {colour} ({'|'.join(plural(w) for w in SHAPE_NAMES[shape])})"
        assert re.search(pattern, first), first
        counted += 1
    assert counted > 10


def test_relations_in_region_captions_match_the_geometry():
    checked = 0
    for k, scene in enumerate(scenes(unique=True)):
        boxes = [[o.cx - o.radius, o.cy - o.radius, o.cx + o.radius, o.cy + o.radius] for o in scene.objects]
        regions = region_captions(np.random.default_rng([2, k]), scene, boxes)
        count = len(scene.objects)
        assert len(regions) == count + count * (count - 1) // 2
        for obj, (text, box) in zip(scene.objects, regions[:count], strict=True):
            assert colours_named(text) == {obj.colour} and shapes_named(text) == {obj.shape}
            assert box == [obj.cx - obj.radius, obj.cy - obj.radius, obj.cx + obj.radius, obj.cy + obj.radius]
        for text, box in regions[count:]:
            match = re.fullmatch(r"(.+?) (to the left of|left of|on the left of|to the right of|right of|"
                                 r"on the right of|above|over|below|under|beneath) (.+)", text)
            assert match, text
            first, words, second = match.groups()
            a, b = (next(o for o in scene.objects if colours_named(part) == {o.colour}
                         and shapes_named(part) == {o.shape}) for part in (first, second))
            dx, dy = b.cx - a.cx, b.cy - a.cy
            truth = ("left" if dx > 0 else "right") if abs(dx) >= abs(dy) else ("above" if dy > 0 else "below")
            said = {"to the left of": "left", "left of": "left", "on the left of": "left", "to the right of": "right",
                    "right of": "right", "on the right of": "right", "above": "above", "over": "above",
                    "below": "below", "under": "below", "beneath": "below"}[words]
            assert said == truth, (text, a, b)
            assert box == [min(a.cx - a.radius, b.cx - b.radius), min(a.cy - a.radius, b.cy - b.radius),
                           max(a.cx + a.radius, b.cx + b.radius), max(a.cy + a.radius, b.cy + b.radius)]
            checked += 1
    assert checked > 50


def test_referable_objects_need_the_size_only_when_colour_and_shape_repeat():
    a = Obj("circle", "red", "small", 20, 20, 8)
    b = Obj("circle", "red", "large", 60, 60, 15)
    c = Obj("star", "blue", "small", 20, 70, 8)
    d = Obj("circle", "red", "small", 70, 20, 8)
    assert referable(Scene(96, (a, b, c))) == [(0, True), (1, True), (2, False)]
    assert referable(Scene(96, (a, c, d))) == [(1, False)]


KEYWORDS = {"size": ("larger", "bigger", "smaller", "small", "large"), "move": ("moved", "top", "bottom", "left",
            "right", "middle", "centre"), "swap": ("left", "right", "above", "below", "over", "under", "beneath"),
            "add": ("extra", "more", "additional", "no"), "remove": ("extra", "more", "additional", "no")}


@pytest.mark.parametrize("kind", EDIT_TYPES)
def test_difference_descriptions_name_the_change(kind):
    described = 0
    for k, scene in enumerate(scenes(80, unique=True, max_objects=3)):
        rng = np.random.default_rng([9, k])
        result = apply_edit(rng, scene, kind, unique=True)
        if result is None:
            continue
        change = result[1]
        texts = difference_descriptions(rng, [change], 5)
        assert 1 <= len(texts) <= 5 and len(set(texts)) == len(texts)
        for text in texts:
            what = change["what"][0]
            assert what["colour"] in colours_named(text) and what["shape"] in shapes_named(text)
            assert any(side in text for side in ("left image", "first image", "image one", "right image",
                                                 "second image", "image two")) or kind in ("move", "swap")
            if kind == "colour":
                assert {change["a"], change["b"]} <= colours_named(text)
            elif kind == "shape":
                assert {change["a"], change["b"]} <= shapes_named(text)
            else:
                assert any(re.search(rf"\b{word}\b", text) for word in KEYWORDS[kind]), text
        described += 1
    assert described > 5


def test_descriptions_of_several_changes_name_each_one():
    scene = Scene(96, (Obj("circle", "red", "large", 25, 25, 15), Obj("star", "blue", "small", 70, 70, 9)))
    rng = np.random.default_rng(0)
    scene_b, colour = apply_edit(rng, scene, "colour", touched=frozenset({1}))
    _, size = apply_edit(rng, scene_b, "size", touched=frozenset({0}))
    for text in difference_descriptions(rng, [colour, size], 5):
        assert {colour["a"], colour["b"], "blue"} <= colours_named(text)
        assert re.search(r"\b(larger|bigger|smaller|large|small)\b", text)
