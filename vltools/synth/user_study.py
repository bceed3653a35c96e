"""A simulated user study (Gordo & Larlus section 3) on the synthetic world: triplets (query, a, b) with votes.

Ground truth: the similarity of two scenes counts the objects they share, 2 for the same colour and shape, 1 for the
same shape or the same colour only (each object of either scene matched at most once, greedily, best matches
first), divided by 2 x the larger object count. Each query of the test split gets images a and b of its split, one
sharing a shape or a colour with it where one exists (as the paper draws both images among the query's visual
neighbours, so that triplets are not trivial) and one at random. Each of PANEL annotators perceives both
similarities with Gaussian noise (NOISE) and chooses the larger, or neither (o3) when they differ by less than
UNSURE; o1 / o2 count the choices of a / b.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vltools.synth.scene import Scene

PANEL = 5
NOISE = 0.12
UNSURE = 0.04
PER_QUERY = 3


def scene_similarity(first: Scene, second: Scene) -> float:
    """Ground-truth similarity in [0, 1] (1 for the same objects)."""
    left = [(o.colour, o.shape) for o in first.objects]
    right = [(o.colour, o.shape) for o in second.objects]
    if not left or not right:
        return 0.0
    score = 0
    for weight, same in ((2, lambda a, b: a == b), (1, lambda a, b: a[0] == b[0] or a[1] == b[1])):
        for item in list(left):
            match = next((other for other in right if same(item, other)), None)
            if match is not None:
                score += weight
                left.remove(item)
                right.remove(match)
    return score / (2 * max(len(first.objects), len(second.objects)))


def user_study(ids: Sequence[str], scenes: Sequence[Scene], splits: Sequence[str], rng: np.random.Generator,
               split: str = "test") -> list[dict]:
    """PER_QUERY triplets {query, a, b, o1, o2, o3} for each image of `split`, in image order."""
    members = [i for i, s in enumerate(splits) if s == split]
    triplets = []
    for query in members:
        others = [i for i in members if i != query]
        if len(others) < 2:
            break
        related = [i for i in others if scene_similarity(scenes[query], scenes[i]) > 0]
        for _ in range(PER_QUERY):
            first = int(rng.choice(related)) if related else int(rng.choice(others))
            second = int(rng.choice([i for i in others if i != first]))
            a, b = (first, second) if rng.random() < 0.5 else (second, first)
            true_a, true_b = scene_similarity(scenes[query], scenes[a]), scene_similarity(scenes[query], scenes[b])
            perceived = np.array([true_a, true_b]) + rng.normal(0, NOISE, size=(PANEL, 2))
            gap = perceived[:, 0] - perceived[:, 1]
            triplets.append({"query": ids[query], "a": ids[a], "b": ids[b], "o1": int((gap >= UNSURE).sum()),
                             "o2": int((gap <= -UNSURE).sum()), "o3": int((np.abs(gap) < UNSURE).sum())})
    return triplets
