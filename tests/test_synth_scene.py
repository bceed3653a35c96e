import itertools
import math

import numpy as np
import pytest

from vltools.synth.scene import (
    COLOURS,
    EDIT_TYPES,
    GAP,
    SHAPES,
    Obj,
    Scene,
    apply_edit,
    position_name,
    relation,
    sample_scene,
    scene_record,
)


def scenes(count=200, side=96, **kwargs):
    return [sample_scene(np.random.default_rng([7, k]), side, **kwargs) for k in range(count)]


def test_vocabulary_is_rich_enough():
    assert len(SHAPES) >= 5 and len(set(SHAPES)) == len(SHAPES)
    assert len(COLOURS) >= 6
    # solid colours must be far apart in RGB so a random CNN can tell them apart
    for (a, ca), (b, cb) in itertools.combinations(COLOURS.items(), 2):
        assert math.dist(ca, cb) > 60, (a, b)


@pytest.mark.parametrize("side", [64, 96, 160])
def test_objects_fit_the_canvas_and_never_overlap(side):
    for scene in scenes(100, side):
        assert 1 <= len(scene.objects) <= 4
        for obj in scene.objects:
            assert obj.radius <= obj.cx < side - obj.radius and obj.radius <= obj.cy < side - obj.radius
        for a, b in itertools.combinations(scene.objects, 2):
            assert math.hypot(a.cx - b.cx, a.cy - b.cy) > a.radius + b.radius + GAP * side - 1e-9


def test_large_objects_are_larger_than_small_ones():
    objects = [o for s in scenes() for o in s.objects]
    small = max(o.radius for o in objects if o.size == "small")
    large = min(o.radius for o in objects if o.size == "large")
    assert large > 1.3 * small


def test_counts_occur_and_unique_scenes_have_distinct_objects():
    repeated = [s for s in scenes() if len({o.identity for o in s.objects}) < len(s.objects)]
    assert len(repeated) > 10
    for scene in scenes(100, unique=True, max_objects=3):
        assert len({o.identity for o in scene.objects}) == len(scene.objects) <= 3


def test_sampling_is_deterministic_per_seed():
    assert scenes(20) == scenes(20)
    assert scenes(20) != [sample_scene(np.random.default_rng([8, k]), 96) for k in range(20)]


@pytest.mark.parametrize(("dx", "dy", "expected"), [(10, 2, "left"), (-10, 3, "right"), (2, 10, "above"),
                                                     (-3, -10, "below")])
def test_relation_follows_the_dominant_axis(dx, dy, expected):
    a = Obj("circle", "red", "small", 40, 40, 8)
    b = Obj("square", "blue", "small", 40 + dx, 40 + dy, 8)
    assert relation(a, b) == expected


def test_position_names_cover_the_three_by_three_grid():
    side = 90
    for cx, cy, name in [(5, 5, "top left"), (45, 5, "top"), (85, 5, "top right"), (5, 45, "left"),
                         (45, 45, "middle"), (85, 45, "right"), (5, 85, "bottom left"), (45, 85, "bottom"),
                         (85, 85, "bottom right")]:
        assert position_name(Obj("star", "red", "small", cx, cy, 3), side) == name


def differences(before: Scene, after: Scene) -> list[tuple]:
    """Independent diff of two scenes whose objects are matched by position in the list."""
    if len(before.objects) != len(after.objects):
        return [("count", len(before.objects), len(after.objects))]
    found = []
    for i, (a, b) in enumerate(zip(before.objects, after.objects, strict=True)):
        for field in ("shape", "colour", "size"):
            if getattr(a, field) != getattr(b, field):
                found.append((field, i))
        if (a.cx, a.cy) != (b.cx, b.cy):
            found.append(("position", i))
    return found


@pytest.mark.parametrize("kind", EDIT_TYPES)
def test_each_edit_changes_exactly_one_thing(kind):
    applied = 0
    for k, scene in enumerate(scenes(150)):
        rng = np.random.default_rng([3, k])
        result = apply_edit(rng, scene, kind)
        if result is None:
            continue
        applied += 1
        new, change = result
        assert change["type"] == kind
        diff = differences(scene, new)
        if kind in ("colour", "shape", "size"):
            assert [d[0] for d in diff] == [kind]
            i = diff[0][1]
            assert change["a"] == getattr(scene.objects[i], kind) and change["b"] == getattr(new.objects[i], kind)
        elif kind == "move":
            assert [d[0] for d in diff] == ["position"]
            i = diff[0][1]
            assert change["a"] == position_name(scene.objects[i], 96) != position_name(new.objects[i], 96)
        elif kind == "swap":
            (_, i), (_, j) = diff
            assert (new.objects[i].cx, new.objects[i].cy) == (scene.objects[j].cx, scene.objects[j].cy)
            assert relation(scene.objects[i], scene.objects[j]) != relation(new.objects[i], new.objects[j])
        else:
            step = 1 if kind == "add" else -1
            assert diff == [("count", len(scene.objects), len(scene.objects) + step)]
            assert change["b"] - change["a"] == step
        for a, b in itertools.combinations(new.objects, 2):
            assert math.hypot(a.cx - b.cx, a.cy - b.cy) > a.radius + b.radius
    assert applied > 10


def test_edits_respect_touched_objects_and_uniqueness():
    for k, scene in enumerate(scenes(100, unique=True, max_objects=3)):
        rng = np.random.default_rng([5, k])
        touched = frozenset(range(len(scene.objects) - 1))
        for kind in ("colour", "shape", "size", "move"):
            result = apply_edit(rng, scene, kind, touched=touched, unique=True)
            if result is not None:
                new, change = result
                assert change["objects"] == [len(scene.objects) - 1]
                assert len({o.identity for o in new.objects}) == len(new.objects)


def test_unknown_edit_is_an_error():
    with pytest.raises(ValueError, match="unknown edit"):
        apply_edit(np.random.default_rng(0), scenes(1)[0], "melt")


def test_scene_record_is_plain_json_data():
    scene = scenes(1)[0]
    boxes = [[0, 0, 1, 1]] * len(scene.objects)
    records = scene_record(scene, boxes)
    assert [r["shape"] for r in records] == [o.shape for o in scene.objects]
    assert all(set(r) == {"shape", "colour", "size", "center", "radius", "position", "box"} for r in records)
