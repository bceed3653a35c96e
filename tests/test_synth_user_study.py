"""The simulated user study: ground-truth scene similarity by hand, triplets and votes."""

from __future__ import annotations

import numpy as np

from vltools.synth.scene import Obj, Scene
from vltools.synth.user_study import PANEL, PER_QUERY, scene_similarity, user_study


def scene(*objects: tuple[str, str]) -> Scene:
    return Scene(96, tuple(Obj(shape, colour, "small", 10 * i, 10, 5) for i, (colour, shape) in enumerate(objects)))


def test_scene_similarity_by_hand():
    red_star, blue_star, red_disc = ("red", "star"), ("blue", "star"), ("red", "circle")
    assert scene_similarity(scene(red_star), scene(red_star)) == 1.0
    assert scene_similarity(scene(red_star), scene(blue_star)) == 0.5           # same shape only: 1 / 2
    assert scene_similarity(scene(red_star, blue_star), scene(red_star)) == 0.5   # 2 / (2 x 2)
    # red star matches red star exactly (2), then blue star and red disc share nothing: 2 / 4
    assert scene_similarity(scene(red_star, blue_star), scene(red_star, ("green", "square"))) == 0.5
    # best matches first: red star <-> red star (2), blue star <-> red disc share nothing
    assert scene_similarity(scene(red_star, red_disc), scene(blue_star, red_disc)) == (2 + 1) / 4
    assert scene_similarity(scene(red_star), scene(("green", "square"))) == 0.0


def test_triplets_of_the_split_with_a_panel_of_votes():
    rng = np.random.default_rng(0)
    colours, shapes = ["red", "blue", "green"], ["star", "circle", "square"]
    scenes = [scene((colours[i % 3], shapes[i // 3 % 3])) for i in range(12)]
    splits = ["test" if i % 2 else "train" for i in range(12)]
    ids = [f"i{i}" for i in range(12)]
    triplets = user_study(ids, scenes, splits, rng)
    assert len(triplets) == PER_QUERY * 6
    for t in triplets:
        assert t["o1"] + t["o2"] + t["o3"] == PANEL
        assert len({t["query"], t["a"], t["b"]}) == 3
        assert all(int(t[k][1:]) % 2 for k in ("query", "a", "b"))
    assert triplets == user_study(ids, scenes, splits, np.random.default_rng(0))
