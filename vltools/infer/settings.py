"""The inference layer's settings as plain values, without torch: how an image run goes (RunOptions), which
inputs a shard takes (`--shard i/n`), and the names and defaults the stages offer (region kinds, the default
bottom-up detector's store name, concept-score grid levels, exact search), which regions extract-regions takes
(RegionOptions) and what an rmac model embeds (QueryOptions).

The command line builds its options from these in every stage's --help, before any stage loads torch; the
inference modules take them from here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from vltools.devices import PRECISIONS
from vltools.distributed import place
from vltools.errors import ArgumentError, VLToolsError, argument
from vltools.infer import checks
from vltools.io.lock import output_lock
from vltools.io.output import is_stdout
from vltools.io.shards import TORCHRUN_STDOUT, Part, names_folder, part_path, this_part
from vltools.vision.limits import DEFAULT_MAX_PIXELS, MAX_PIXELS_LIMIT

REGION_KINDS = ("detector", "grid", "boxes", "none", "bottom-up")
GLOBAL_POOLS = ("avg", "rmac", "tencrop")  # --global: average pooling, R-MAC, SCO's 10-crop average
BACKBONE_NAMES = ("resnet101", "resnet152", "resnet50", "resnet18", "vgg19")
FEATURE_DTYPES = ("float16", "float32")   # storage types of feature datasets
BOTTOM_UP_WEIGHTS = "bottom-up"  # the default detector: the model-store name bin/fetch_bottom_up_weights.sh registers
CONCEPT_LEVELS = (1, 2, 3, 6)    # SCO's grid levels n (n x n windows each): 50 regions
EXACT = "exact"                  # search over embeddings by blocked matmul (else a FAISS index factory string)
INDEX_METRICS = ("ip", "l2")     # a saved index (`vltools index`): inner product (cosine: embeddings are unit) or L2
DEFAULT_FACTORY = "Flat"         # a saved index's FAISS factory string: exact; "IVF4096,PQ64" is approximate
DEFAULT_TRAIN_SIZE = 262144      # rows sampled to train an IVF / PQ index: 64 per list of IVF4096
MATCH_BLOCK = (128, 512)         # match's default images x captions per model call (--block-images, --block-captions)
# --checkpoint-seconds: a resumable stage commits its finished items this often (and after each batch slower than
# this). A commit costs about 4 ms to write and 10 ms at the final merge (measured: 2,000 one-row parts of 512
# floats), so 10 s spends about 0.15% of the run on commits and a kill -9 loses at most 10 s of work.
COMMIT_SECONDS = 10.0

# what each stage accepts: the model names, and the one line that refuses any other checkpoint
ROLES = {
    "matching": (("vse", "sgr", "saf", "sco"), "{path}: a checkpoint of {model!r}, not a matching model; give a vse, "
                 "sgr, saf or sco checkpoint (captioners are used by `vltools caption`)"),
    "captioner": (("neuraltalk2", "adaptive-attention"), "{path}: a checkpoint of model {model!r}, not a captioner; "
                  "{role} must be one of neuraltalk2, adaptive-attention (vltools train --model "
                  "neuraltalk2|adaptive-attention)"),
    "l2c": (("l2c",), "{path}: a checkpoint of model {model!r}; describing pairs needs an l2c checkpoint (vltools "
            "train --model l2c)"),
    "concepts": (("concepts",), "{path}: is a {model!r} checkpoint, not a concept CNN; train one with vltools train "
                 "--model concepts"),
    "encodable": (("vse", "sgr", "saf", "sco", "rmac"), "{path}: a checkpoint of {model!r}, which cannot encode; "
                  "give a vse, sco or rmac checkpoint"),
    "detector": (("bottom-up",), "{path}: a checkpoint of {model!r}, not a region detector; {role} needs the "
                 "bottom-up-attention weights converted by `vltools convert bottom-up-weights FILE --trust -o bua.pt`"),
}


@dataclass
class RunOptions:
    """How to run: batching, devices and precision, output dtype, failure policy, resumption."""

    batch_size: int = 8
    workers: int = 2
    device: str = "auto"
    precision: str = "fp32"
    dtype: str = "float16"
    strict: bool = False
    resume: bool = False
    commit_seconds: float = COMMIT_SECONDS
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0

    def __post_init__(self) -> None:
        """Each option's type and range, as the command line's option types check them (vltools.infer.checks)."""
        checks.integer(self.batch_size, "batch_size", 1)
        checks.integer(self.workers, "workers", 0)
        checks.device(self.device, "device")
        checks.choice(self.precision, "precision", PRECISIONS)
        checks.choice(self.dtype, "dtype", FEATURE_DTYPES)
        checks.flag(self.strict, "strict")
        checks.flag(self.resume, "resume")
        checks.number(self.commit_seconds, "commit_seconds", 0)
        checks.integer(self.max_pixels, "max_pixels", 1, MAX_PIXELS_LIMIT)
        checks.integer(self.seed, "seed", 0, checks.MAX_SEED)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`i/n` -> (i, n) with 0 <= i < n; None stays None."""
    if text is None:
        return None
    try:
        index, count = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ArgumentError("shard", f"{text!r}: expected i/n, for example 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise ArgumentError("shard", f"{text!r}: need 0 <= i < n")
    return index, count


def process_part(shard: str | None, output: str | os.PathLike | None) -> Part | None:
    """Which inputs this process takes and where it writes them (vltools.io.shards.Part; None: all of them, one
    output): under torchrun every process writes its own part, and so does a `--shard i/n` run whose output is a
    folder. Under torchrun, standard output is refused (each process needs a file of its own); results kept in
    memory (`output` None, the API) are each process's part."""
    where = place()
    if where.active and output is not None and is_stdout(output):
        raise VLToolsError(TORCHRUN_STDOUT)
    folder = output is not None and not is_stdout(output) and names_folder(output)
    return this_part(parse_shard(shard), where.rank, where.world_size, folder)


def part_output(output: str | os.PathLike | None, part: Part | None, suffix: str) -> str | None:
    """The file this process writes: `output` itself, or its part's file in the folder `output` (created)."""
    if part is None or not part.in_folder or output is None:
        return None if output is None else str(output)
    return part_path(output, part, suffix)


@contextlib.contextmanager
def locked_part(output: str | os.PathLike | None, shard: str | None,
                suffix: str) -> Iterator[tuple[str | None, Part | None]]:
    """(the file this process writes, its `Part`) for a per-item stage writing `output` (`process_part`,
    `part_output`), with that file's lock held: a part's by every process of a torchrun job, each its own. A failed
    run removes the folder of parts it made while it is empty."""
    part = process_part(shard, output)
    if (part is None or not part.in_folder) and output is not None and os.path.isdir(output):
        raise VLToolsError(f"{output}: is a folder; give -o a file, or --shard I/N (or torchrun) to write a part of "
                           "a set into it")
    made = part is not None and part.in_folder and output is not None and not os.path.exists(output)
    target = part_output(output, part, suffix)
    try:
        with output_lock(target, own=part is not None and part.in_folder):
            yield target, part
    except BaseException:
        if made:       # the folder this run made, unless another process's part is in it
            with contextlib.suppress(OSError):
                os.rmdir(output)
        raise


@dataclass
class RegionOptions:
    """Which regions and vectors: see `vltools extract-regions --help` for each option's meaning."""

    regions: str = "detector"
    global_pool: str | None = None
    image_size: int | None = None
    crop_size: int = 224
    num_regions: int | None = None
    min_regions: int | None = None
    max_regions: int | None = None
    score_threshold: float = 0.2
    detector_weights: str | None = None
    detector_vocab: str | None = None
    backbone: str = "resnet101"
    weights: str = "imagenet"

    def __post_init__(self) -> None:
        """Each option's type and range, as the command line's option types check them (vltools.infer.checks)."""
        checks.choice(self.regions, "regions", REGION_KINDS)
        checks.choice(self.global_pool, "global_pool", (*GLOBAL_POOLS, None))
        checks.optional_integer(self.image_size, "image_size", 16, checks.MAX_IMAGE_SIDE)
        checks.integer(self.crop_size, "crop_size", 16, checks.MAX_IMAGE_SIDE)
        for name in ("num_regions", "min_regions", "max_regions"):
            checks.optional_integer(getattr(self, name), name, 1)
        checks.number(self.score_threshold, "score_threshold", 0, 1)
        checks.text(self.detector_weights, "detector_weights", optional=True)
        checks.text(self.detector_vocab, "detector_vocab", optional=True)
        checks.choice(self.backbone, "backbone", BACKBONE_NAMES)
        checks.text(self.weights, "weights")

    @property
    def variable(self) -> bool:
        """Whether each image keeps its own number of regions (min/max) rather than a fixed K."""
        return self.min_regions is not None or self.max_regions is not None

    def problem(self) -> str | None:
        """What is wrong with this combination of options, in one line (None: nothing)."""
        if self.variable and self.num_regions is not None:
            return (f"give either {argument('num_regions')} (fixed K) or {argument('min_regions')}/"
                    f"{argument('max_regions')} (variable K)")
        if self.regions == "bottom-up" and (self.global_pool or self.image_size
                                            or (self.backbone, self.weights) != ("resnet101", "imagenet")):
            return (f"{argument('regions', 'bottom-up')} takes no {argument('global_pool')}, "
                    f"{argument('image_size')}, {argument('backbone')} or {argument('weights')}: its detector is "
                    "one network that resizes images as released")
        if self.detector_vocab and self.regions != "bottom-up":
            return (f"{argument('detector_vocab')} names the bottom-up detector's classes; it needs "
                    f"{argument('regions', 'bottom-up')}")
        return None


@dataclass
class QueryOptions:
    """What an rmac model embeds and how (`vltools.infer.rmac`)."""

    proxy: str | None = None
    split: str = "test"
    first: int | None = None
    with_text: bool = False
    add: Sequence[str] = ()
    subtract: Sequence[str] = ()
    image_size: int | None = None
    batch_size: int = 32
    workers: int = 0


def check_search(top_k: object, precision: object, block_images: object, block_captions: object,
                 image_cache_mb: object, index: object, nprobe: object, checkpoint_seconds: object) -> None:
    """Each option of a search (`vltools.infer.match.Search`, which checks itself with this) by its type and range,
    as the command line's option types check them; the stage and the API call it before torch loads."""
    checks.integer(top_k, "top_k", 1)
    checks.choice(precision, "precision", PRECISIONS)
    checks.integer(block_images, "block_images", 1)
    checks.integer(block_captions, "block_captions", 1)
    checks.number(image_cache_mb, "image_cache_mb", 0)
    checks.text(index, "index")
    checks.integer(nprobe, "nprobe", 1)
    checks.number(checkpoint_seconds, "checkpoint_seconds", 0)
