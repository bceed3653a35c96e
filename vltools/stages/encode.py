"""`vltools encode` and `vltools.encode`: the embeddings of a separable model (vse, sco; rmac on images; OpenCLIP on
images or captions)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vltools.devices import PRECISIONS, resolve_device
from vltools.errors import ArgumentError, argument
from vltools.infer import checks
from vltools.infer.settings import COMMIT_SECONDS, QueryOptions, locked_part, parse_shard
from vltools.io.held import Embeddings, instance_of
from vltools.io.output import is_stdout

if TYPE_CHECKING:
    from vltools.infer.loader import LoadedModel

PathLike = str | os.PathLike
LOADER = "vltools.infer.loader"    # LoadedModel's module, imported (with torch) once the arguments are checked


def encode(source: PathLike | Sequence[PathLike], model: PathLike | LoadedModel, output: PathLike | None = None, *,
           split: str | None = None, captions: PathLike | None = None, concepts: PathLike | None = None,
           sentences: PathLike | None = None, batch_size: int = 256, device: str = "auto", precision: str = "fp32",
           resume: bool = False, checkpoint_seconds: float = COMMIT_SECONDS, shard: str | None = None,
           **rmac: object) -> Embeddings | None:
    """The embeddings of a separable model for the images of a features file (those the `split` of `captions`
    names, when given), the captions of a captions file's `split`, or (rmac) the images of an images input: written
    to `output` (`-`: standard output) as the HDF5 of `/ids` and `/emb`, or, without `output`, returned as
    `Embeddings` (None when written). SCO reads `concepts` and ("ctx +
    sen") `sentences`; an rmac model takes the keywords of `vltools.infer.rmac.QueryOptions`. An OpenCLIP model
    (`openclip:ARCH[:PRETRAINED_OR_FILE]`) encodes the captions of a captions file or the images of images inputs
    (SOURCE may then be a list of them; `workers` decoding processes). Every run keeps its finished embeddings in
    `OUTPUT.partial/`; `resume` continues an interrupted one (vltools.io.checkpoint). `shard` "i/n" encodes the
    i-th of n runs of the ids, into `output`, or as part i of n of a set when `output` is a folder
    (vltools.io.shards); under torchrun each process encodes its part (in memory: each returns its own)."""
    if not instance_of(model, LOADER, "LoadedModel"):
        checks.path(model, "model")
    checks.path(output, "output", optional=True)
    checks.split(split, "split", optional=True)
    checks.path(concepts, "concepts", optional=True)
    checks.integer(batch_size, "batch_size", 1)
    checks.device(device, "device")
    checks.choice(precision, "precision", PRECISIONS)
    checks.number(checkpoint_seconds, "checkpoint_seconds", 0)
    checks.known(rmac, set(QueryOptions.__dataclass_fields__), "encode")
    checks.path(rmac.get("proxy"), "proxy", optional=True)
    checks.optional_integer(rmac.get("first"), "first", 1)
    checks.flag(rmac.get("with_text", False), "with_text")
    for name in ("add", "subtract"):
        checks.texts(rmac.get(name, ()), name)
    checks.optional_integer(rmac.get("image_size"), "image_size", 32, checks.MAX_IMAGE_SIDE)
    checks.integer(rmac.get("workers", 0), "workers", 0)
    checks.flag(resume, "resume")
    parse_shard(shard)
    if resume and (output is None or is_stdout(output)):
        raise ArgumentError("resume", f"needs {argument('output', 'PATH')}, the file the interrupted run was writing")
    options = {"split": split, "captions": captions, "concepts": concepts, "sentences": sentences,
               "batch_size": batch_size, "precision": precision, "rmac": QueryOptions(**rmac), "resume": resume,
               "checkpoint_seconds": checkpoint_seconds}
    from vltools.infer.encode import encode_embeddings, encode_file  # torch: once every argument is checked
    from vltools.infer.loader import LoadedModel, load_model
    from vltools.infer.runner import finished_part

    with locked_part(output, shard, "h5") as (target, part):
        if finished_part(target, part, resume):
            return None
        loaded = model if isinstance(model, LoadedModel) else load_model(model, "encodable")
        _check_sources(loaded, source, rmac, captions, concepts, sentences)
        if target is None:
            return encode_embeddings(loaded, source, resolve_device(device), part=part, **options)
        encode_file(loaded, source, None if is_stdout(target) else target, resolve_device(device), part=part,
                    **options)
        return None


def _check_sources(loaded: LoadedModel, source: PathLike | Sequence[PathLike], rmac: dict[str, object],
                   captions: PathLike | None, concepts: PathLike | None, sentences: PathLike | None) -> None:
    """Refuse several sources where one file is read (features, captions), and what an OpenCLIP model would not
    read: rmac's options (but workers), and --captions, --concepts, --sentences."""
    from vltools.infer.loader import OpenClipModel

    several = isinstance(source, list | tuple)
    if several and (not source or not all(isinstance(item, str | os.PathLike) for item in source)):
        raise ArgumentError("source", "must be a file path, or a non-empty list of images inputs")
    if several and len(source) > 1 and not (isinstance(loaded, OpenClipModel) or loaded.name == "rmac"):
        raise ArgumentError("source", f"takes several inputs only for images (rmac, openclip models); {loaded.path} "
                                      "encodes one features or captions file")
    if isinstance(loaded, OpenClipModel):
        given = {"captions": captions, "concepts": concepts, "sentences": sentences,
                 **{name: value for name, value in rmac.items() if name != "workers"}}
        unread = [name for name, value in given.items() if value not in (None, False, ())]
        if unread:
            raise ArgumentError(unread[0], f"is not read by the OpenCLIP model {loaded.path}, which encodes images "
                                           "or captions as they are; leave it out")
