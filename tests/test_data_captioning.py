"""Caption-image pairs for captioners: negatives of CL, fixed mismatches of IL, the collated batch layout."""

from __future__ import annotations

import numpy as np
import torch

from vltools.data.captioning import batch_images, collate_captioning, draw_negatives, fixed_mismatches


def test_negatives_are_captions_of_other_images_and_mismatches_are_derangements():
    image_index = np.repeat(np.arange(6), 5)
    drawn = np.stack([draw_negatives(image_index, 5, item, np.random.default_rng(item)) for item in range(30)])
    assert drawn.shape == (30, 5) and (image_index[drawn] != image_index[:, None]).all()
    assert len(np.unique(drawn)) > 20
    other = fixed_mismatches(7, seed=3)
    assert (other != np.arange(7)).all() and np.array_equal(other, fixed_mismatches(7, seed=3))


def test_collate_lays_out_positives_then_negative_sets_or_mismatched_images():
    image = {"global": np.ones(3, dtype=np.float32)}
    items = [{"image": image, "tokens": [1, 5, 2], "negatives": [[1, 6, 2], [1, 7, 7, 2]]},
             {"image": image, "tokens": [1, 8, 8, 8, 2], "negatives": [[1, 9, 2], [1, 4, 2]]}]
    batch = collate_captioning(items)
    assert batch["tokens"][:, 1].tolist() == [5, 8, 6, 9, 7, 4]
    assert batch["image_rows"].tolist() == [0, 1, 0, 1, 0, 1]
    assert batch["tokens"].shape == (6, 5) and batch_images(batch)["global"].shape == (2, 3)
    mismatched = [{"image": image, "tokens": [1, 5, 2], "mismatch": {"global": np.zeros(3, dtype=np.float32)}}]
    batch = collate_captioning(mismatched)
    assert batch["image_rows"].tolist() == [0, 1] and batch["tokens"].tolist() == [[1, 5, 2], [1, 5, 2]]
    assert torch.equal(batch["image.global"][1], torch.zeros(3))
