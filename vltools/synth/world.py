"""Build the whole synthetic world into a folder: three image sets, their records, and a README.

- main set (`images/`, `masks/`, `images.jsonl`, `captions.jsonl`, `regions.jsonl`): 1-4 objects per image,
  5 captions and region captions each; a fraction of images are one-change edits of an earlier image
  (near-duplicates), kept in the same split as their source.
- pair set (`pair_images/`, `pair_masks/`, `pair_images.jsonl`, `pairs.jsonl`): its own images, two per pair,
  the second made from the first by 1-3 controlled changes, with 1-5 difference descriptions.
- auxiliary set (`aux_images/`, `aux_masks/`, `aux_images.jsonl`, `aux_captions.jsonl`): single-image
  captions drawn like the pair images, for the auxiliary captioning task.

Every image draws its randomness from `np.random.default_rng([seed, set, index])`, so each set is
independent of the others' sizes and the same options always give byte-identical files.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.output import written_folder
from vltools.io.progress import progress
from vltools.io.records import write_records
from vltools.synth.grammar import difference_descriptions, image_captions, region_captions
from vltools.synth.render import png_bytes, render
from vltools.synth.scene import COLOURS, EDIT_TYPES, SHAPES, SIZES, Scene, apply_edit, sample_scene, scene_record
from vltools.synth.user_study import NOISE, PANEL, PER_QUERY, user_study

README_HEADER = "vltools synthetic world"
MAIN, PAIRS, AUX, SPLITS, STUDY = 0, 1, 2, 3, 4  # random streams
SPLIT_FRACTIONS = (("test", 0.1), ("val", 0.1))  # the rest is train
MAX_GROUP = 3  # a source image and at most two edits of it
PAIR_CHANGES = (1, 2, 3)
PAIR_CHANGE_PROBS = (0.5, 0.3, 0.2)


@dataclass(frozen=True)
class WorldOptions:
    """Everything that determines the world's content."""

    seed: int = 0
    images: int = 1000
    pairs: int = 400
    aux_images: int = 1000
    size: int = 96
    edit_fraction: float = 0.4

    def check(self) -> None:
        """Refuse sizes that cannot give a usable world."""
        if self.images < 10:
            raise VLToolsError(f"--images {self.images}: give at least 10 images (for train, val and test splits)")
        for name, value in (("--pairs", self.pairs), ("--aux-images", self.aux_images)):
            if 0 < value < 10 or value < 0:
                raise VLToolsError(f"{name} {value}: give 0 (none) or at least 10")
        if not 48 <= self.size <= 1024:
            raise VLToolsError(f"--size {self.size}: give an image side between 48 and 1024 pixels")
        if not 0 <= self.edit_fraction < 1:
            raise VLToolsError(f"--edit-fraction {self.edit_fraction}: give a fraction in [0, 1)")


def _ids(prefix: str, count: int) -> list[str]:
    width = max(5, len(str(count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(count)]


def assign_splits(group_sizes: list[int], rng: np.random.Generator) -> list[str]:
    """A split per group: groups in random order fill test, then val, to about 10% of items each; the rest
    are train. Groups are never divided, so near-duplicates stay together."""
    total = sum(group_sizes)
    targets = [(name, max(1, round(fraction * total))) for name, fraction in SPLIT_FRACTIONS]
    splits = ["train"] * len(group_sizes)
    filled = dict.fromkeys((name for name, _ in targets), 0)
    stage = 0
    for g in rng.permutation(len(group_sizes)):
        while stage < len(targets) and filled[targets[stage][0]] >= targets[stage][1]:
            stage += 1
        if stage == len(targets):
            break
        name = targets[stage][0]
        splits[int(g)] = name
        filled[name] += group_sizes[int(g)]
    return splits


def _edit(rng: np.random.Generator, scene: Scene, kinds: Iterable[str], touched: frozenset[int] = frozenset(),
          unique: bool = False) -> tuple[Scene, dict] | None:
    """The first of `kinds` (tried in random order) that applies to the scene."""
    kinds = tuple(kinds)
    for k in rng.permutation(len(kinds)):
        result = apply_edit(rng, scene, kinds[int(k)], touched=touched, unique=unique)
        if result is not None:
            return result
    return None


def _image_record(image_id: str, set_name: str, scene: Scene, boxes: list[list[int]], split: str) -> dict:
    return {"image_id": image_id, "path": f"{set_name}images/{image_id}.png",
            "mask": f"{set_name}masks/{image_id}.png", "boxes": boxes, "split": split,
            "objects": scene_record(scene, boxes)}


def _draw(folder: Path, set_name: str, image_id: str, scene: Scene, rng: np.random.Generator) -> list[list[int]]:
    """Render and write `<set>images/<id>.png` and `<set>masks/<id>.png`; return the object boxes."""
    image, mask, boxes = render(scene, rng)
    (folder / f"{set_name}images" / f"{image_id}.png").write_bytes(png_bytes(image))
    (folder / f"{set_name}masks" / f"{image_id}.png").write_bytes(png_bytes(mask))
    return boxes


def build_main(folder: Path, options: WorldOptions) -> dict:
    """The main image set with captions, region captions and near-duplicate edits; returns counts."""
    ids = _ids("img", options.images)
    scenes: list[Scene] = []
    edits: list[dict | None] = []
    groups: list[list[int]] = []
    rngs = []
    for index in range(options.images):
        rng = np.random.default_rng([options.seed, MAIN, index])
        rngs.append(rng)
        result = None
        if groups and len(groups[-1]) < MAX_GROUP and rng.random() < options.edit_fraction:
            source = groups[-1][int(rng.integers(len(groups[-1])))]
            result = _edit(rng, scenes[source], EDIT_TYPES)
        if result is None:
            scenes.append(sample_scene(rng, options.size))
            edits.append(None)
            groups.append([index])
        else:
            scenes.append(result[0])
            edits.append({"of": ids[source], **result[1]})
            groups[-1].append(index)
    group_splits = assign_splits([len(g) for g in groups], np.random.default_rng([options.seed, SPLITS, MAIN]))
    splits = [""] * options.images
    for group, split in zip(groups, group_splits, strict=True):
        for index in group:
            splits[index] = split
    images, captions, regions = [], [], []
    for index in progress(range(options.images), total=options.images, desc="synth images", unit="img"):
        image_id, scene, rng = ids[index], scenes[index], rngs[index]
        boxes = _draw(folder, "", image_id, scene, rng)
        record = _image_record(image_id, "", scene, boxes, splits[index])
        if edits[index] is not None:
            record["edit"] = edits[index]
        images.append(record)
        captions += [{"image_id": image_id, "caption": text, "split": splits[index], "caption_id": f"{image_id}#{k}"}
                     for k, text in enumerate(image_captions(rng, scene))]
        regions += [{"image_id": image_id, "caption": text, "box": box, "region_id": f"{image_id}#r{k}",
                     "split": splits[index]} for k, (text, box) in enumerate(region_captions(rng, scene, boxes))]
    write_records(folder / "images.jsonl", images)
    write_records(folder / "captions.jsonl", captions)
    write_records(folder / "regions.jsonl", regions)
    votes = list(user_study(ids, scenes, splits, np.random.default_rng([options.seed, STUDY, MAIN])))
    study = write_records(folder / "user_study.jsonl", votes) if votes else 0  # no file when the test split is tiny
    return {"images": len(images), "captions": len(captions), "regions": len(regions), "user_study": study,
            "edits": sum(e is not None for e in edits), "edit_types": Counter(e["type"] for e in edits if e),
            "splits": Counter(splits), "objects": Counter(len(s.objects) for s in scenes)}


def _pair_changes(rng: np.random.Generator, scene: Scene) -> tuple[Scene, list[dict]]:
    """Apply 1-3 changes to separate objects of a scene with unique objects."""
    wanted = int(rng.choice(PAIR_CHANGES, p=PAIR_CHANGE_PROBS))
    touched: frozenset[int] = frozenset()
    changes = []
    for _ in range(wanted):
        result = _edit(rng, scene, EDIT_TYPES, touched=touched, unique=True)
        if result is None:
            break
        scene, change = result
        changes.append(change)
        if change["type"] == "remove":
            gone = change["objects"][0]
            touched = frozenset(t - (t > gone) for t in touched)
        else:
            touched = touched | frozenset(change["objects"])
    return scene, changes


def build_pairs(folder: Path, options: WorldOptions) -> dict:
    """The pair set: two images per pair and 1-5 difference descriptions; returns counts."""
    pair_ids = _ids("pair", options.pairs)
    made = []
    for index, pair_id in enumerate(pair_ids):
        rng = np.random.default_rng([options.seed, PAIRS, index])
        first = sample_scene(rng, options.size, 1, 3, unique=True)
        second, changes = _pair_changes(rng, first)
        made.append((pair_id, rng, first, second, changes))
    splits = assign_splits([1] * options.pairs, np.random.default_rng([options.seed, SPLITS, PAIRS]))
    images, pairs = [], []
    for (pair_id, rng, first, second, changes), split in progress(zip(made, splits, strict=True), total=len(made),
                                                                    desc="synth pairs", unit="pair"):
        for image_id, scene in ((f"{pair_id}a", first), (f"{pair_id}b", second)):
            boxes = _draw(folder, "pair_", image_id, scene, rng)
            images.append(_image_record(image_id, "pair_", scene, boxes, split))
        for text in difference_descriptions(rng, changes, int(rng.integers(1, 6))):
            pairs.append({"pair_id": pair_id, "image_a": f"{pair_id}a", "image_b": f"{pair_id}b",
                          "description": text, "split": split, "changes": changes})
    write_records(folder / "pair_images.jsonl", images)
    write_records(folder / "pairs.jsonl", pairs)
    return {"pairs": len(made), "descriptions": len(pairs), "pair_images": len(images), "splits": Counter(splits),
            "changes": Counter(len(m[4]) for m in made)}


def build_aux(folder: Path, options: WorldOptions) -> dict:
    """The auxiliary single-image captioning set, drawn like the pair images; returns counts."""
    ids = _ids("aux", options.aux_images)
    splits = assign_splits([1] * options.aux_images, np.random.default_rng([options.seed, SPLITS, AUX]))
    images, captions = [], []
    for index in progress(range(options.aux_images), total=options.aux_images, desc="synth aux", unit="img"):
        rng = np.random.default_rng([options.seed, AUX, index])
        scene = sample_scene(rng, options.size, 1, 3, unique=True)
        boxes = _draw(folder, "aux_", ids[index], scene, rng)
        images.append(_image_record(ids[index], "aux_", scene, boxes, splits[index]))
        captions += [{"image_id": ids[index], "caption": text, "split": splits[index],
                      "caption_id": f"{ids[index]}#{k}"} for k, text in enumerate(image_captions(rng, scene))]
    write_records(folder / "aux_images.jsonl", images)
    write_records(folder / "aux_captions.jsonl", captions)
    return {"images": len(images), "captions": len(captions), "splits": Counter(splits)}


def _counts(counter: Counter) -> str:
    return ", ".join(f"{key} {counter[key]}" for key in sorted(counter))


def readme(options: WorldOptions, main: dict, pairs: dict | None, aux: dict | None) -> str:
    """README.txt: the grammar, the files, the counts and how to make the same world again (no dates)."""
    command = (f"vltools synth OUT --seed {options.seed} --images {options.images} --pairs {options.pairs} "
               f"--aux-images {options.aux_images} --size {options.size} --edit-fraction {options.edit_fraction}")
    lines = [
        f"{README_HEADER}",
        "",
        "A toy world of coloured shapes in the formats of real vision-language data, written by `vltools synth`.",
        "Numbers measured on it prove that a pipeline runs and learns; they say nothing about the papers.",
        f"Made with: {command}",
        "The same options always give byte-identical files.",
        "",
        "WORLD",
        f"- images: {options.size} x {options.size} RGB PNG, solid shapes on a plain light background"
        " (each channel 226-246, drawn per image).",
        f"- shapes: {', '.join(SHAPES)}; sizes: {', '.join(SIZES)};",
        *textwrap.wrap("colours: " + ", ".join(f"{name} #{bytes(rgb).hex()}" for name, rgb in COLOURS.items()) + ".",
                       width=100, initial_indent="  ", subsequent_indent="  "),
        "- objects never overlap; spatial relations (left of, right of, above, below) follow the axis of larger",
        "  displacement between two objects' centres; positions name a cell of a 3 x 3 grid (top left ... middle).",
        "- boxes: [x1, y1, x2, y2] in pixels, x1/y1 inclusive and x2/y2 exclusive, the tight box of the object's",
        "  mask; masks: single-channel PNG, 255 on objects (pixels at least half covered), 0 elsewhere.",
        "",
        "MAIN SET (image-text matching, captioning, semantic retrieval)",
        f"- {main['images']} images with 1-4 objects (objects per image: {_counts(main['objects'])}).",
        f"- {main['edits']} images are edits of an earlier image that change exactly one thing:",
        f"  {_counts(main['edit_types'])}.",
        "  The images.jsonl field `edit` says what changed, and from which image (`of`). An edit stays in",
        "  its source's split, so test images have near-duplicate distractors.",
        f"- captions: 5 per image ({main['captions']}), from template families (full listing, count, relation,",
        "  position, subset, colours only, shapes only) with synonyms and random order; the first caption",
        "  of each image lists every object. A caption that does not mention what an edit changed fits both",
        "  images (so do generic ones such as \"a disc\"), which caps retrieval R@1 below 100%, as in real data.",
        f"- region captions: {main['regions']}, one per object and one per pair of objects a phrase can single",
        "  out (box = union of the two boxes), as Visual Genome region descriptions.",
        f"- splits by image: {_counts(main['splits'])}.",
        f"- user study: {main['user_study']} triplets (query, a, b) of test images, {PER_QUERY} per query, voted by",
        f"  a simulated panel of {PANEL} annotators who judge shared objects with noise (sd {NOISE}): o1 / o2 chose",
        "  a / b, o3 neither (Gordo & Larlus section 3 layout; see vltools/synth/user_study.py).",
    ]
    if pairs is not None:
        lines += [
            "",
            "PAIR SET (comparative captioning, Birds-to-Words role)",
            f"- {pairs['pairs']} pairs of their own images (pair<k>a, pair<k>b; {pairs['pair_images']} images of 1-3",
            "  objects with distinct colour and shape); image b is image a after 1-3 changes to separate objects",
            f"  (changes per pair: {_counts(pairs['changes'])}): colour, shape, size, swap, move, add, remove.",
            f"- {pairs['descriptions']} difference descriptions, 1-5 per pair, one line each in pairs.jsonl;",
            "  every description names every change; the field `changes` holds them.",
            f"- splits by pair: {_counts(pairs['splits'])}.",
        ]
    if aux is not None:
        lines += [
            "",
            "AUXILIARY SET (single-image captions, CUB role)",
            f"- {aux['images']} images drawn like the pair images, 5 captions each ({aux['captions']}).",
            f"- splits by image: {_counts(aux['splits'])}.",
        ]
    files = [
        ("images/<id>.png, masks/<id>.png", "main set images and foreground masks"),
        ("images.jsonl", "main set, `images` kind: image_id, path, mask, boxes, split, objects, edit"),
        ("captions.jsonl", "`captions` kind: image_id, caption, split, caption_id (<image_id>#<k>)"),
        ("regions.jsonl", "`regions` kind: image_id, caption, box, region_id, split"),
        ("user_study.jsonl", "`votes` kind, user-study triplets: query, a, b, o1, o2, o3 (for `vltools score "
         "semantic --triplets`; absent when the test split is too small for one)"),
    ]
    if pairs is not None:
        files += [("pair_images/, pair_masks/", "pair set images and masks"),
                  ("pair_images.jsonl", "pair set, `images` kind"),
                  ("pairs.jsonl", "`pairs` kind: pair_id, image_a, image_b, description, split, changes")]
    if aux is not None:
        files += [("aux_images/, aux_masks/", "auxiliary set images and masks"),
                  ("aux_images.jsonl", "auxiliary set, `images` kind"),
                  ("aux_captions.jsonl", "`captions` kind")]
    lines += ["", "FILES (paths in the JSONL files are relative to this folder)"]
    lines += [f"- {name}: {what}" for name, what in files]
    lines += ["", "USE",
              "- region features of the object boxes: vltools extract-regions OUT/images.jsonl --regions boxes",
              "- segment-pool with these masks: vltools segment-pool OUT/pair_images.jsonl --masks OUT/pair_masks"]
    return "\n".join(lines) + "\n"


def is_world(folder: Path) -> bool:
    """Whether `folder` holds a world written by `vltools synth` (its README starts with the header)."""
    try:
        with open(folder / "README.txt", encoding="utf-8") as stream:
            return stream.readline().strip() == README_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def build_world(folder: Path, options: WorldOptions) -> dict:
    """Write every file of the world into the empty folder `folder`; return the counts."""
    for prefix in ("", "pair_", "aux_"):
        for kind in ("images", "masks"):
            (folder / f"{prefix}{kind}").mkdir()
    main = build_main(folder, options)
    pairs = build_pairs(folder, options) if options.pairs else None
    aux = build_aux(folder, options) if options.aux_images else None
    for prefix, built in (("pair_", pairs), ("aux_", aux)):
        if built is None:
            for kind in ("images", "masks"):
                (folder / f"{prefix}{kind}").rmdir()
    (folder / "README.txt").write_text(readme(options, main, pairs, aux), encoding="utf-8", newline="\n")
    return {"options": asdict(options), "main": main, "pairs": pairs, "aux": aux}


def write_world(out: str | os.PathLike, options: WorldOptions, force: bool = False) -> dict:
    """Build the world in a hidden sibling folder, then rename it to `out`, so `out` is never half written.

    An existing non-empty `out` is refused, unless `force` and it holds an earlier synthetic world.
    """
    options.check()
    with written_folder(out, force, is_world, "synthetic world", "README.txt from vltools synth") as staging:
        counts = build_world(staging, options)
    return counts
