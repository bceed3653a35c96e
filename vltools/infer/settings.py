"""The inference layer's settings as plain values, without torch: how an image run goes (RunOptions), which
inputs a shard takes (`--shard i/n`), and the names and defaults the stages offer (region kinds, the default
bottom-up detector's store name, concept-score grid levels, exact search).

The command line builds its options from these in every stage's --help, before any stage loads torch; the
inference modules take them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from vltools.devices import PRECISIONS
from vltools.errors import ArgumentError
from vltools.infer import checks
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
