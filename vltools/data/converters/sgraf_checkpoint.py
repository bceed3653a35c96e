"""Import a checkpoint released with the SGRAF code (`model_best.pth.tar`) as a vltools checkpoint.

The released format is `torch.save({"model": [img_enc, txt_enc, sim_enc state dicts], "opt": argparse
Namespace, "epoch", "best_rsum", "Eiters"})`.  The Namespace makes it a pickle that only a full unpickler
reads, which can run code from the file, hence the explicit `trust`.  The vltools models use the released
submodule names, so the three state dicts become one with the prefixes `img_enc.`, `txt_enc.`, `sim_enc.`.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch

from vltools.data.converters.scan_vocab import load_vocabulary
from vltools.errors import VLToolsError, argument, first_line
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import BOTTOM_UP
from vltools.models import build_model, default_config, schema_version
from vltools.text.vocab import Vocabulary

PARTS = ("img_enc", "txt_enc", "sim_enc")
# the released opts.py fields that shape the model, under the same names in the vltools config
OPT_FIELDS = ("img_dim", "word_dim", "embed_size", "sim_dim", "num_layers", "bi_gru", "no_imgnorm", "no_txtnorm")
LOCAL_BN = "sim_enc.v_global_w.embedding_local.1.weight"   # BatchNorm over region positions: K regions


def import_sgraf_checkpoint(src_path: str | os.PathLike, vocab: Vocabulary | str | os.PathLike,
                            trust: bool) -> dict:
    """The released checkpoint at `src_path` as keyword arguments of `vltools.io.checkpoints.save_checkpoint`.

    `vocab` is the vocabulary the checkpoint was trained with (a Vocabulary, or a SCAN vocabulary JSON or
    vltools vocabulary file); its size must equal the rows of the word embedding.
    """
    src = Path(src_path)
    if not src.is_file():
        raise VLToolsError(f"{src}: no such checkpoint")
    if not trust:
        raise VLToolsError(f"{src}: a released SGRAF checkpoint is a pickle (it holds an argparse Namespace), and "
                           f"loading one can run arbitrary code; pass {argument('trust', 'True')} if you trust where "
                           "the file came from")
    words = vocab if isinstance(vocab, Vocabulary) else load_vocabulary(vocab)
    try:
        raw = torch.load(src, map_location="cpu", weights_only=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, AttributeError, ModuleNotFoundError) as exc:
        raise VLToolsError(f"{src}: not a readable PyTorch checkpoint ({first_line(exc)})") from None
    parts, opt = _released_parts(src, raw)
    name, config = _config(src, opt, parts)
    state_dict = {f"{part}.{key}": tensor for part, sd in zip(PARTS, parts, strict=True) for key, tensor in sd.items()}
    _fill_missing_batch_counts(state_dict)
    rows = state_dict["txt_enc.embed.weight"].shape[0] if "txt_enc.embed.weight" in state_dict else None
    if rows != len(words):
        raise VLToolsError(f"{src}: the word embedding has {rows} rows but the vocabulary has {len(words)} words; "
                           "pass the vocabulary the checkpoint was trained with (e.g. f30k_precomp_vocab.json or "
                           "coco_precomp_vocab.json from the SGRAF repository)")
    model = build_model(name, config, len(words))
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise VLToolsError(f"{src}: the weights do not fit a {name} model with {config} ({detail})") from None
    # the released models were trained on the bottom-up-attention features (SCAN's precomp data)
    train_state = {"epoch": int(raw.get("epoch", 0)), "iteration": int(raw.get("Eiters", 0)),
                   "best_rsum": float(raw.get("best_rsum", 0.0)), "inputs": {"feature_extractor": BOTTOM_UP}}
    return {"model": name, "config": config, "state_dict": model.state_dict(), "vocab": list(words.words),
            "train_state": train_state, "schema": schema_version(name)}


def convert_sgraf_checkpoint(checkpoint: str | os.PathLike, vocab: str | os.PathLike, output: str | os.PathLike,
                             trust: bool = False) -> dict[str, object]:
    """`vltools convert sgraf-checkpoint`: the released checkpoint (trained with the vocabulary file `vocab`) as a
    vltools checkpoint at `output`; returns the "model" (sgr or saf) and its "config"."""
    payload = import_sgraf_checkpoint(checkpoint, vocab, trust)
    save_checkpoint(output, **payload)
    return {"model": payload["model"], "config": payload["config"]}


def _released_parts(src: Path, raw: object) -> tuple[list[dict], object]:
    if not isinstance(raw, dict) or "model" not in raw or "opt" not in raw:
        raise VLToolsError(f"{src}: not a released SGRAF checkpoint (expected a dict with 'model' and 'opt')")
    parts = raw["model"]
    if not isinstance(parts, (list, tuple)) or len(parts) != 3 or not all(isinstance(p, dict) for p in parts):
        raise VLToolsError(f"{src}: 'model' must be a list of three state dicts ({', '.join(PARTS)})")
    for part, sd in zip(PARTS, parts, strict=True):
        for key, value in sd.items():
            if not isinstance(value, torch.Tensor):
                raise VLToolsError(f"{src}: {part} entry {key!r} is a {type(value).__name__}, not a tensor")
    return [dict(p) for p in parts], raw["opt"]


def _config(src: Path, opt: object, parts: list[dict]) -> tuple[str, dict]:
    module_name = getattr(opt, "module_name", None)
    if module_name not in ("SGR", "SAF"):
        raise VLToolsError(f"{src}: opt.module_name is {module_name!r}; only SGR and SAF checkpoints exist")
    name = module_name.lower()
    fields = OPT_FIELDS + (("sgr_step",) if name == "sgr" else ())
    missing = [field for field in fields if not hasattr(opt, field)]
    if missing:
        raise VLToolsError(f"{src}: opt lacks {', '.join(missing)}; not a checkpoint of the released SGRAF code")
    config = default_config(name)
    config.update({field: type(config[field])(getattr(opt, field)) for field in fields})
    local_bn = parts[2].get(LOCAL_BN.removeprefix("sim_enc."))
    if local_bn is None:
        raise VLToolsError(f"{src}: sim_enc has no {LOCAL_BN.removeprefix('sim_enc.')!r}")
    config["num_regions"] = int(local_bn.shape[0])
    return name, config


def _fill_missing_batch_counts(state_dict: dict) -> None:
    """Checkpoints from PyTorch < 0.4.1 have no BatchNorm `num_batches_tracked`; it does not affect eval."""
    for key in [k for k in state_dict if k.endswith(".running_mean")]:
        state_dict.setdefault(key.removesuffix("running_mean") + "num_batches_tracked", torch.tensor(0))
