import io
import math

import numpy as np
import pytest
from PIL import Image

from vltools.synth.render import BACKGROUND, png_bytes, render
from vltools.synth.scene import COLOURS, SHAPES, Obj, Scene, sample_scene


def one(shape, colour="red", radius=30, side=96):
    return Scene(side, (Obj(shape, colour, "large", side // 2, side // 2, radius),))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_is_drawn_solid_in_its_colour(shape):
    image, mask, boxes = render(one(shape), np.random.default_rng(0))
    assert image.shape == (96, 96, 3) and image.dtype == np.uint8
    assert mask.shape == (96, 96) and set(np.unique(mask)) == {0, 255}
    inside = image[mask == 255].astype(int)
    fully = (np.abs(inside - COLOURS["red"]).sum(axis=1) == 0).mean()
    assert fully > 0.8  # solid fill; only anti-aliased edge pixels are blends
    assert tuple(image[48, 48]) == COLOURS["red"]  # the centre lies inside every shape
    assert len(boxes) == 1


def test_areas_match_the_geometry():
    radius = 30
    areas = {shape: (render(one(shape, radius=radius), np.random.default_rng(0))[1] == 255).sum()
             for shape in ("circle", "square", "diamond")}
    assert areas["circle"] == pytest.approx(math.pi * (0.92 * radius) ** 2, rel=0.03)
    assert areas["square"] == pytest.approx(2 * radius ** 2, rel=0.03)  # inscribed in the bounding circle
    assert areas["diamond"] == pytest.approx(2 * 0.7 * radius ** 2, rel=0.03)


def test_boxes_are_tight_around_each_object_and_hold_every_mask_pixel():
    for k in range(60):
        rng = np.random.default_rng([11, k])
        scene = sample_scene(rng, 96)
        image, mask, boxes = render(scene, rng)
        covered = np.zeros_like(mask, dtype=bool)
        for obj, (x1, y1, x2, y2) in zip(scene.objects, boxes, strict=True):
            assert 0 <= x1 < x2 <= 96 and 0 <= y1 < y2 <= 96
            assert x1 <= obj.cx < x2 and y1 <= obj.cy < y2
            covered[y1:y2, x1:x2] = True
            crop = mask[y1:y2, x1:x2] == 255
            # tight: every border row and column of the box holds a mask pixel
            assert crop[0].any() and crop[-1].any() and crop[:, 0].any() and crop[:, -1].any()
            assert tuple(image[obj.cy, obj.cx]) == COLOURS[obj.colour]
        assert not (mask == 255)[~covered].any()


def test_background_is_a_plain_light_colour():
    image, mask, _ = render(one("star", radius=10), np.random.default_rng(4))
    background = image[mask == 0]
    far = image[:20, :20].reshape(-1, 3)
    assert (far == far[0]).all()  # plain
    assert BACKGROUND[0] <= far[0].min() and far[0].max() <= BACKGROUND[1]
    assert background.mean() > 200


def test_png_round_trips_without_metadata():
    image, mask, _ = render(one("triangle"), np.random.default_rng(0))
    for array, mode in ((image, "RGB"), (mask, "L")):
        data = png_bytes(array)
        assert data == png_bytes(array)
        decoded = Image.open(io.BytesIO(data))
        assert decoded.mode == mode
        assert np.array_equal(np.asarray(decoded), array)
        chunks, offset = [], 8
        while offset < len(data):
            length = int.from_bytes(data[offset:offset + 4], "big")
            chunks.append(data[offset + 4:offset + 8])
            offset += 12 + length
        assert set(chunks) == {b"IHDR", b"IDAT", b"IEND"}  # no tIME or text chunks


def test_render_is_deterministic():
    scene = sample_scene(np.random.default_rng(1), 96)
    first = render(scene, np.random.default_rng(2))
    second = render(scene, np.random.default_rng(2))
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1]) and first[2] == second[2]
