"""Karpathy's `dataset_{coco,flickr8k,flickr30k}.json` (the standard captioning / retrieval splits) -> captions.

Layout: `{"images": [{"filename", "imgid", "split", "sentences": [{"tokens", "raw", "imgid", "sentid"}],
"sentids", "cocoid"?, "filepath"?}], "dataset"}`; splits are train, val, test and (COCO) restval.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection

from vltools.errors import argument, input_error
from vltools.io.records import check_converted
from vltools.io.sources import field, json_list, load_json, record_unique

ID_FIELDS = ("filename", "cocoid", "imgid", "filepath")
TEXT_FIELDS = ("raw", "tokens")


def karpathy_image_id(image: dict, id_field: str, path: object, where: str) -> str:
    """The image id by `id_field`: filename, cocoid, imgid, or filepath (`filepath/filename`, COCO's layout)."""
    if id_field == "filepath":
        folder = field(image, "filepath", str, path, where)
        return f"{folder}/{field(image, 'filename', str, path, where)}"
    value = field(image, id_field, str if id_field == "filename" else int, path, where)
    return str(value)


def karpathy_caption(sentence: dict, text_field: str, path: object, where: str) -> str:
    """The caption text: `raw` stripped, or the `tokens` joined by spaces."""
    if text_field == "tokens":
        tokens = json_list(field(sentence, "tokens", list, path, where), path, where, "tokens")
        odd = [token for token in tokens if not isinstance(token, str)]
        if odd:
            raise input_error(path, where, f"'tokens' holds {json.dumps(odd[0])[:40]}, not a string",
                              f"fix that sentence, or convert with {argument('text_field', 'raw')}")
        text = " ".join(tokens)
    else:
        text = str(field(sentence, "raw", str, path, where)).strip()
    if not text:
        raise input_error(path, where, f"empty caption ('{text_field}')", "fix or remove that sentence")
    return text


def read_karpathy(path: str | os.PathLike, id_field: str = "filename", text_field: str = "raw",
                  restval_as: str | None = None, only_splits: Collection[str] | None = None) -> list[dict]:
    """Captions records of a Karpathy dataset JSON, in file order; caption_id = sentid.

    `restval_as` renames the restval split (e.g. to train); `only_splits` keeps only those (after renaming).
    """
    if id_field not in ID_FIELDS:
        raise ValueError(f"id_field must be one of {ID_FIELDS}")
    if text_field not in TEXT_FIELDS:
        raise ValueError(f"text_field must be one of {TEXT_FIELDS}")
    data = load_json(path)
    images = json_list(field(data, "images", list, path, "top level"), path, "top level", "images")
    records: list[dict] = []
    seen_images: dict[str, str] = {}
    seen_sentences: dict[str, str] = {}
    for index, image in enumerate(images):
        where = f"images[{index}]"
        image_id = karpathy_image_id(image, id_field, path, where)
        record_unique(seen_images, image_id, where, path, where, f"image id {image_id!r}",
                      f"choose another {argument('id_field')}")
        split = str(field(image, "split", str, path, where))
        if split == "restval" and restval_as:
            split = restval_as
        sentences = json_list(field(image, "sentences", list, path, where), path, where, "sentences")
        if only_splits is not None and split not in only_splits:
            continue
        for number, sentence in enumerate(sentences):
            at = f"{where}.sentences[{number}]"
            caption_id = str(field(sentence, "sentid", int, path, at))
            record_unique(seen_sentences, caption_id, f"one of {where}", path, at, f"sentid {caption_id}",
                          "sentids must be unique")
            records.append(check_converted({"image_id": image_id,
                                            "caption": karpathy_caption(sentence, text_field, path, at),
                                            "split": split, "caption_id": caption_id}, "captions", path, at))
    if not records:
        raise input_error(path, None, "no captions" + (f" in splits {', '.join(sorted(only_splits))}"
                                                       if only_splits else ""),
                          f"check the file and {argument('only_splits')}")
    return records
