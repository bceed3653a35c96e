"""A trained captioner at work: load its checkpoint, caption images in batches, score captions under images.

    loaded = load_model("aa.pt", "captioner")              # vltools.infer.loader: model, vocabulary, prep
    for ids, captions, logprob in caption_batches(loaded.model, loaded.vocab, reader, ids, beam_size=3): ...
    logp = logp_matrix(loaded, reader, image_ids, captions)  # [captions, images] log p(c | I), in blocks

`caption` (the stage), the captioning task's validation and the benchmarks call these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from vltools.data.captioning import feature_fields, image_tensors
from vltools.data.draws import SAMPLES, id_key, keyed_seed
from vltools.decoding.search import beam_search, greedy, sample
from vltools.distributed import gather_rows, share
from vltools.errors import VLToolsError, argument
from vltools.infer.loader import LoadedModel
from vltools.io.checkpoint import Checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.progress import log, progress
from vltools.io.records import read_records
from vltools.losses import sequence_logprob
from vltools.models.captioners import Captioner
from vltools.text.captions import decode
from vltools.text.vocab import Vocabulary

CAPTIONERS = ("neuraltalk2", "adaptive-attention")
EMPTY_WARNING = 0.10    # above this share of empty captions a run probably went wrong: warn


def split_records(captions: str | os.PathLike, split: str | None) -> list[dict]:
    """The caption records of `split` (every one when None) of a captions JSONL; an empty choice is an error
    naming the splits there are."""
    records = read_records(captions, "captions")
    if split is None:
        if not records:
            raise VLToolsError(f"{captions}: no captions")
        return records
    chosen = [r for r in records if r.get("split") == split]
    if not chosen:
        found = sorted({str(r.get("split")) for r in records})
        raise VLToolsError(f"{captions}: no captions in split {split!r} (splits present: {', '.join(found)}); "
                           f"choose one of them with {argument('split')}")
    return chosen


def images_to_caption(reader: FeaturesReader, records: Sequence[dict] | None, captions: object = None) -> list[str]:
    """The images a caption run covers: those `records` name, in first-mention order (each must be in the
    features file; `captions` names their file in the error), or every image of the file in its order."""
    if records is None:
        return list(reader.ids)
    image_ids = list(dict.fromkeys(r["image_id"] for r in records))
    reader.require(image_ids, captions)
    return image_ids


def check_features(model: Captioner, reader: FeaturesReader) -> list[str]:
    """The datasets to read for this captioner; a features file without them, or with vectors of another width
    than the checkpoint's, is a one-line error before any batch runs."""
    for name in model.features:
        if name not in reader.fields:
            kind = "a global vector (extract-regions --global avg)" if name == "global" else \
                "spatial features (extract-regions --regions grid or detector)"
            raise VLToolsError(f"{reader.path}: has no /{name} dataset; {type(model).__name__} needs {kind}")
        width = reader.shape(name)[-1]
        if width != model.img_dim:
            raise VLToolsError(f"{reader.path}: /{name} is {width}-d but the {type(model).__name__} checkpoint was "
                               f"trained on {model.img_dim}-d features; caption features from the same extractor "
                               "as its training data")
    return feature_fields(reader.fields, model.features)


def _images(reader: FeaturesReader, ids: Sequence[str], fields: list[str], device: torch.device
            ) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in image_tensors(reader.read(ids, fields)).items()}


@torch.inference_mode()
def caption_batches(model: Captioner, vocab: Vocabulary, reader: FeaturesReader, ids: Sequence[str],
                    method: str = "beam", beam_size: int = 3, max_len: int = 16, length_penalty: float = 0.0,
                    temperature: float = 1.0, seed: int = 0, batch_size: int = 50,
                    device: torch.device | str = "cpu") -> Iterator[tuple[list[str], list[str], np.ndarray]]:
    """(ids, captions, their log-probabilities) batch by batch in the order of `ids`; `method` is beam, greedy or
    sample (NaN log-probabilities are what a model that overflowed gave: `refuse_nonfinite_results`). A sampled batch
    draws from a generator keyed by (seed, its first id), so it draws the same words whichever process of a
    torchrun job samples it."""
    device = torch.device(device)
    model = model.to(device)
    fields = check_features(model, reader)
    generator = torch.Generator(device=device)
    for start in range(0, len(ids), batch_size):
        chunk = list(ids[start:start + batch_size])
        generator.manual_seed(keyed_seed(seed, SAMPLES, id_key(chunk[0])))
        state, static = model.init_state(_images(reader, chunk, fields, device))
        if method == "beam":
            out = beam_search(model.step, state, static, beam_size=beam_size, max_len=max_len,
                              length_penalty=length_penalty)
        elif method == "greedy":
            out = greedy(model.step, state, static, max_len=max_len)
        elif method == "sample":
            out = sample(model.step, state, static, max_len=max_len, temperature=temperature, generator=generator)
        else:
            raise ValueError(f"method must be beam, greedy or sample, not {method!r}")
        yield chunk, decode(vocab, out.tokens.cpu()), out.logprob.float().cpu().numpy()


def check_captions(records: Sequence[dict], model: object, what: str = "captions") -> None:
    """Refuse a run whose every caption is empty (decoding ended at the first word: an untrained checkpoint, or
    features unlike its training features), and warn when more than EMPTY_WARNING of them are empty."""
    empty = sum(not str(record["caption"]).strip() for record in records)
    if records and empty == len(records):
        raise VLToolsError(f"{model}: all {len(records)} {what} it wrote are empty (decoding ended at the first word), "
                           "so nothing was written; check that the checkpoint is trained and that the features come "
                           "from the extractor it was trained on")
    if empty > EMPTY_WARNING * len(records):
        log.warning("%d of the %d %s (%.0f%%) are empty (decoding ended at the first word): the checkpoint may be "
                    "undertrained, or the features unlike those it was trained on", empty, len(records), what,
                    100 * empty / len(records))


def checked_captions(kept: Checkpoint, order: Sequence[str], model: object, what: str = "captions") -> list[dict]:
    """The finished captions of `order` (all finished, in `kept`) in that order, once `check_captions` accepts
    them. Captions refused as a whole are not worth resuming: the checkpoint goes with them."""
    records = [record for _, block in kept.gather(order) for record in block]
    try:
        check_captions(records, model, what)
    except VLToolsError:
        kept.remove()
        raise
    return records


@torch.inference_mode()
def logp_matrix(loaded: LoadedModel, reader: FeaturesReader, image_ids: Sequence[str], captions: Sequence[str],
                block_images: int = 25, block_captions: int = 100, device: torch.device | str = "cpu",
                quiet: bool = False) -> np.ndarray:
    """log p(caption_t | image_j) as [len(captions), len(image_ids)] float32, by teacher forcing blocks of
    images x captions at once (memory bounded by the block sizes: rows = block_images x block_captions)."""
    device = torch.device(device)
    model = loaded.model.to(device)
    fields = check_features(model, reader)
    tokens = loaded.prep.encode(loaded.vocab, list(captions))
    out = np.zeros((len(captions), len(image_ids)), dtype=np.float32)
    blocks = [(i, c) for i in range(0, len(image_ids), block_images) for c in range(0, len(captions), block_captions)]
    for i, c in progress(blocks, total=len(blocks), desc="log p(c|I)", unit="blocks") if not quiet else blocks:
        image_block = list(image_ids[i:i + block_images])
        cond = model.conditioning(_images(reader, image_block, fields, device))
        block = tokens[c:c + block_captions].to(device)
        block = block[:, :int((block != 0).sum(1).max())]
        n_img, n_cap = len(image_block), block.size(0)
        rows = torch.arange(n_img, device=device).repeat_interleave(n_cap)
        seq = block.repeat(n_img, 1)
        state, static = model.decoder.init_state(cond.rows(rows))
        total = torch.zeros(seq.size(0), device=device)
        for t in range(seq.size(1) - 1):
            logp, state = model.step(seq[:, t], state, static)
            total += sequence_logprob(logp.unsqueeze(1), seq[:, t + 1:t + 2])
        out[c:c + n_cap, i:i + n_img] = total.view(n_img, n_cap).T.float().cpu().numpy()
    return out



def shared_logp_matrix(loaded: LoadedModel, reader: FeaturesReader, image_ids: Sequence[str], captions: Sequence[str],
                       block_images: int = 25, block_captions: int = 100,
                       device: torch.device | str = "cpu") -> np.ndarray | None:
    """`logp_matrix` of a torchrun job: each process scores every caption under its blocks of images (every N-th)
    and the first gets the whole matrix (the others None); `logp_matrix` itself in a job of one."""
    mine = share(len(image_ids), block_images)
    part = logp_matrix(loaded, reader, [image_ids[k] for k in mine], captions, block_images, block_captions, device)
    found = gather_rows(part.T, mine)
    return None if found is None else np.ascontiguousarray(found.T)
