"""Models by name, their default configurations, and building one from a checkpoint.

Captioners (`neuraltalk2`, `adaptive-attention`) are vltools.models.captioners.Captioner subclasses; `l2c`
describes differences of image pairs (vltools.models.l2c). Every
matching model encodes images and captions separately and scores every image against every caption:
`encode_images(regions, num_regions)`, `encode_captions(tokens, lengths)`,
`similarity(img_emb, cap_emb, cap_lengths) -> [Bi, Bc]`, `forward(...) -> [B, B]`, and the class
attribute `separable` (True when similarity is an inner product of [B, E] embeddings).
"""

from __future__ import annotations

from torch import nn

from vltools.errors import VLToolsError, first_line
from vltools.models.captioners import AdaptiveAttention, NeuralTalk2
from vltools.models.concepts import ConceptCNN, build_concept_cnn
from vltools.models.l2c import L2C
from vltools.models.rmac import RMAC
from vltools.models.sco import SCO
from vltools.models.sgraf import SAF, SGR
from vltools.models.vse import VSE

MODELS: dict[str, type[nn.Module]] = {"vse": VSE, "sgr": SGR, "saf": SAF, "neuraltalk2": NeuralTalk2,
                                      "adaptive-attention": AdaptiveAttention, "rmac": RMAC, "sco": SCO,
                                      "l2c": L2C, "concepts": ConceptCNN}


def _model_class(name: str) -> type[nn.Module]:
    if name not in MODELS:
        raise VLToolsError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name]


def default_config(name: str) -> dict:
    """The released code's default hyper-parameters of model `name` (a fresh dict)."""
    return dict(_model_class(name).DEFAULTS)


def build_model(name: str, config: dict, vocab_size: int) -> nn.Module:
    """A freshly initialised model: defaults updated by `config` (unknown keys are an error)."""
    full = default_config(name)
    unknown = sorted(set(config) - set(full))
    if unknown:
        raise VLToolsError(f"model {name!r} has no setting {', '.join(unknown)}; "
                           f"its settings are {', '.join(sorted(full))}")
    full.update(config)
    if name == "concepts":  # a torchvision trunk: built from its name, weights loaded by the caller
        return build_concept_cnn(str(full["backbone"]), "none", int(full["num_concepts"]))[0]
    return _model_class(name)(vocab_size=vocab_size, **full)


def model_from_checkpoint(payload: dict, source: str = "checkpoint") -> nn.Module:
    """The model stored in a loaded vltools checkpoint (see vltools.io.checkpoints), in eval mode; `source`
    (the file) names it in errors."""
    vocab = payload.get("vocab")
    if not vocab:
        raise VLToolsError(f"{source}: checkpoint of model {payload.get('model')!r} has no vocabulary; "
                           "it must be saved with the word list its text encoder was trained on")
    model = build_model(payload["model"], payload["config"], len(vocab))
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise VLToolsError(f"{source}: checkpoint weights do not fit model {payload['model']!r} with its config "
                           f"({first_line(exc)})") from None
    return model.eval()
