"""R-MAC embeddings for `encode`: image queries or database images, image + text queries (V+T), text modifiers.

A query's visual embedding phi is combined with text embeddings theta of the same model: with its own captions
(`with_text`, the paper's (V+T, V+T) queries: theta of the image's tf-idf row) and with words added or subtracted
(paper Figure 5: theta of each word's one-hot tf-idf vector), as l2norm(phi + theta_text + sum theta_add -
sum theta_subtract).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vltools.devices import autocast
from vltools.distributed import gather_rows, share
from vltools.errors import VLToolsError, shown_ids
from vltools.infer.loader import LoadedModel
from vltools.infer.settings import QueryOptions
from vltools.io.checkpoints import TASK_SETTINGS, checkpoint_field
from vltools.io.fields import INTEGER
from vltools.io.proxy import ProxyFile, read_proxy_file
from vltools.text.tfidf import word_columns
from vltools.vision.embedding import ImageStore, embed_images, embedding_batches
from vltools.vision.images import list_inputs


def _words(model, vocab: list[str], words: Sequence[str], option: str, checkpoint: object) -> torch.Tensor:
    try:
        columns = word_columns(words, vocab)
    except ValueError as exc:
        raise VLToolsError(f"{option} {exc}; use words of the training captions ({checkpoint})") from None
    return model.encode_texts(torch.eye(len(vocab))[columns]).sum(dim=0)


@dataclass
class RmacImages:
    """What `encode_rmac` embeds, checked: the images' ids and store (decoded with the longest side `size`) and,
    with a proxy, its rows of those images (their captions' tf-idf, for `with_text`)."""

    ids: list[str]
    store: ImageStore
    size: int
    proxy: ProxyFile | None
    rows: np.ndarray | None


def rmac_images(loaded: LoadedModel, images_path: str | os.PathLike | Sequence[str | os.PathLike],
                options: QueryOptions) -> RmacImages:
    """The images of IMAGES, one input or a list of them (`list_inputs`: folders, image files, lists, an images
    JSONL; all their images, or those of `options.split` in the proxy, the first `first`), after checking that the
    model can embed the texts `options` asks for."""
    model, checkpoint, vocab = loaded.model, loaded.path, loaded.words
    texts = options.with_text or options.add or options.subtract
    if texts and model.text is None:
        raise VLToolsError(f"{checkpoint}: the model was trained without text (task.loss v), so it cannot embed "
                           "--with-text / --add / --subtract; train it with task.loss=vt")
    if options.with_text and options.proxy is None:
        raise VLToolsError("--with-text embeds each image's captions: give --proxy PROXY.h5 (their tf-idf rows)")
    inputs = [images_path] if isinstance(images_path, str | os.PathLike) else list(images_path)
    items = {item.image_id: item for item in list_inputs(inputs)}
    proxy = read_proxy_file(options.proxy) if options.proxy else None
    rows = None
    if proxy is not None:
        if proxy.vocab != vocab:
            raise VLToolsError(f"{options.proxy}: its vocabulary differs from the one {checkpoint} was trained with; "
                               "give the proxy the model was trained on")
        rows = proxy.split_rows(options.split)
        if len(rows) == 0:
            raise VLToolsError(f"{options.proxy}: no image in split {options.split!r}; give --split")
        rows = rows[:options.first]
        ids = [proxy.ids[r] for r in rows]
    else:
        ids = list(items)[:options.first]
    missing = [i for i in ids if i not in items]
    if missing:
        raise VLToolsError(f"{images_path}: {len(missing)} images of the proxy are not in it: {shown_ids(missing)}")
    size = options.image_size or checkpoint_field(loaded.payload, f"{TASK_SETTINGS}.image_size", INTEGER, loaded.path,
                                                  576)
    return RmacImages(ids, ImageStore([items[i] for i in ids], size), size, proxy, rows)


def _phi(loaded: LoadedModel, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The model's visual embedding as the image loops call it: (padded uint8 images, their sizes) -> phi."""
    model = loaded.model.to(device)
    return lambda batch, sizes: model.encode_images(batch, sizes.to(device))


def image_batches(loaded: LoadedModel, images: RmacImages, positions: Sequence[int], options: QueryOptions,
                  device: torch.device, precision: str = "fp32") -> Iterator[np.ndarray]:
    """The visual embeddings phi of the images at `positions`, a [B, D] array per batch of `options.batch_size`,
    computed in `precision` (no progress line: the inference runner reports it)."""
    with autocast(device, precision):
        yield from embedding_batches(_phi(loaded, device), images.store, positions, device, options.batch_size,
                                     options.workers, desc=None)


def rmac_queries(loaded: LoadedModel, images: RmacImages, phi: np.ndarray, options: QueryOptions,
                 device: torch.device) -> tuple[np.ndarray, dict]:
    """The l2-normalised queries of the visual embeddings `phi` of `images` (with their captions' and the words'
    text embeddings, as `options` says) and the attributes to record."""
    model, checkpoint, vocab = loaded.model.to(device), loaded.path, loaded.words
    emb = torch.from_numpy(phi)
    if options.with_text or options.add or options.subtract:
        with torch.inference_mode():
            total = emb.to(device)
            if options.with_text:
                total = total + model.encode_texts(torch.from_numpy(images.proxy.tfidf[images.rows].toarray())
                                                   .to(device))
            if options.add:
                total = total + _words(model, vocab, options.add, "--add", checkpoint).to(device)
            if options.subtract:
                total = total - _words(model, vocab, options.subtract, "--subtract", checkpoint).to(device)
            emb = F.normalize(total, dim=1).cpu()
    query = "image" + (" + its captions" if options.with_text else "") + \
        "".join(f" + {w}" for w in options.add) + "".join(f" - {w}" for w in options.subtract)
    return emb.numpy().astype(np.float32), {"side": "images", "query": query, "image_size": images.size,
                                            "split": options.split if images.proxy is not None else "all"}


def encode_rmac(loaded: LoadedModel, images_path: str | os.PathLike | Sequence[str | os.PathLike],
                options: QueryOptions, device: torch.device) -> tuple[list[str], np.ndarray | None, dict]:
    """(ids, l2-normalised embeddings, attributes to record) of the images of IMAGES (`rmac_images`), as database
    images or as queries with text. Under torchrun the processes share the batches and the first gets every
    embedding (the others None and no attributes)."""
    images = rmac_images(loaded, images_path, options)
    mine = share(len(images.ids), options.batch_size)   # under torchrun this process's batches; the first gets all rows
    found = gather_rows(embed_images(_phi(loaded, device), images.store, mine, device, options.batch_size,
                                     options.workers, desc="encode images"), mine)
    if found is None:
        return images.ids, None, {}
    emb, attrs = rmac_queries(loaded, images, found, options, device)
    return images.ids, emb, attrs
