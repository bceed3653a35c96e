"""Whole-image embedding loops: images decoded by id (and cached), padded into batches at the bottom right with
their sizes, and a batched embedding of images of different sizes equal to embedding each image alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vltools.errors import VLToolsError
from vltools.vision.embedding import ImageStore, embed_images, pad_batch
from vltools.vision.images import ImageItem

SIZE = 8
# (height, width): the longer side is SIZE, so decoding keeps every pixel and the expected image is the file's
SHAPES = [(5, 8), (8, 3), (8, 8), (2, 8)]
CPU = torch.device("cpu")


def pixels(seed: int, shape: tuple[int, int]) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(*shape, 3), dtype=np.uint8)


@pytest.fixture
def images(tmp_path):
    """PNG files (lossless) of the SHAPES, their items and their (3, h, w) pixels."""
    items, arrays = [], []
    for n, shape in enumerate(SHAPES):
        array = pixels(n, shape)
        path = tmp_path / f"im{n}.png"
        Image.fromarray(array).save(path)
        items.append(ImageItem(f"id{n}", path))
        arrays.append(array.transpose(2, 0, 1))
    return items, arrays


def test_store_decodes_images_by_position_as_uint8_rgb(images):
    items, arrays = images
    store = ImageStore(items, SIZE)
    assert len(store) == 4
    for n in (2, 0, 3):
        image = store.image(n)
        assert image.dtype == torch.uint8 and tuple(image.shape) == (3, *SHAPES[n])
        np.testing.assert_array_equal(image.numpy(), arrays[n])


def test_store_resizes_the_longer_side_to_size(tmp_path):
    path = tmp_path / "big.png"
    Image.fromarray(pixels(9, (10, 16))).save(path)       # h 10, w 16 -> longer side 8: h 5, w 8
    assert tuple(ImageStore([ImageItem("big", path)], SIZE).image(0).shape) == (3, 5, 8)


def test_cached_store_keeps_decoded_images_and_an_uncached_one_rereads(images):
    items, arrays = images
    cached, uncached = ImageStore(items, SIZE, cache=True), ImageStore(items, SIZE)
    first = cached.image(1)
    uncached.image(1)
    items[1].path.unlink()
    assert cached.image(1) is first
    with pytest.raises(VLToolsError, match="'id1' cannot be used"):
        uncached.image(1)


def test_a_bad_image_is_refused_on_one_line_naming_file_and_id(tmp_path):
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(VLToolsError) as caught:
        ImageStore([ImageItem("broken", path)], SIZE).image(0)
    message = str(caught.value)
    assert message.startswith(f"{path}: image 'broken' cannot be used (empty file (0 bytes))")
    assert "\n" not in message


def test_pad_batch_pads_at_the_bottom_right_and_gives_sizes():
    a = torch.arange(1, 19, dtype=torch.uint8).reshape(3, 2, 3)
    b = torch.arange(101, 113, dtype=torch.uint8).reshape(3, 4, 1)
    padded, sizes = pad_batch([a, b])
    assert padded.dtype == torch.uint8 and tuple(padded.shape) == (2, 3, 4, 3)
    assert sizes.dtype == torch.int64 and sizes.tolist() == [[2, 3], [4, 1]]
    assert torch.equal(padded[0, :, :2, :3], a) and torch.equal(padded[1, :, :4, :1], b)
    assert int(padded[0, :, 2:].abs().sum()) == 0 and int(padded[1, :, :, 1:].abs().sum()) == 0
    alone, size = pad_batch([b])
    assert torch.equal(alone[0], b) and size.tolist() == [[4, 1]]


def real_mean(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """An encoder that reads only each image's real pixels: per-channel mean and sum over h x w, and h, w."""
    out = []
    for image, (h, w) in zip(images, sizes.tolist(), strict=True):
        real = image[:, :h, :w].float()
        out.append(torch.cat([real.mean(dim=(1, 2)), real.sum(dim=(1, 2)), torch.tensor([h, w], dtype=torch.float)]))
    return torch.stack(out)


def expected_row(array: np.ndarray) -> np.ndarray:
    """real_mean of one (3, h, w) image computed directly with numpy."""
    values = array.astype(np.float64)
    return np.concatenate([values.mean(axis=(1, 2)), values.sum(axis=(1, 2)), array.shape[1:]])


@pytest.mark.parametrize("batch_size,cache", [(1, False), (2, False), (3, True), (10, False)])
def test_batched_embedding_equals_embedding_each_image_alone(images, batch_size, cache):
    items, arrays = images
    store = ImageStore(items, SIZE, cache=cache)
    order = [3, 0, 2, 1, 0]
    got = embed_images(real_mean, store, order, CPU, batch_size=batch_size)
    assert got.dtype == np.float32 and got.shape == (5, 8)
    alone = np.concatenate([embed_images(real_mean, store, [n], CPU, batch_size=1) for n in order])
    np.testing.assert_allclose(got, alone, rtol=1e-6)
    np.testing.assert_allclose(got, np.stack([expected_row(arrays[n]) for n in order]), rtol=1e-5)


def test_embedding_with_a_worker_process_gives_the_same_rows(images):
    items, arrays = images
    got = embed_images(real_mean, ImageStore(items, SIZE), [1, 3, 2], CPU, batch_size=2, workers=1)
    np.testing.assert_allclose(got, np.stack([expected_row(arrays[n]) for n in (1, 3, 2)]), rtol=1e-5)


def test_encoder_sees_padded_uint8_batches_and_nothing_is_embedded_for_no_indices(images):
    items, _ = images
    seen = []

    def encode(batch: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        seen.append((batch.dtype, tuple(batch.shape), sizes.tolist()))
        return torch.zeros(len(batch), 2, dtype=torch.float16)

    got = embed_images(encode, ImageStore(items, SIZE), [0, 1, 3], CPU, batch_size=2)
    assert got.dtype == np.float32 and got.shape == (3, 2)
    assert seen == [(torch.uint8, (2, 3, 8, 8), [[5, 8], [8, 3]]), (torch.uint8, (1, 3, 2, 8), [[2, 8]])]
    empty = embed_images(encode, ImageStore(items, SIZE), [], CPU)
    assert empty.shape == (0, 0) and empty.dtype == np.float32
