"""Image captioners of Dai & Lin's experiments: NeuralTalk2 and AdaptiveAttention, over the shared LSTMDecoder.

Both take `images`, a dict of feature tensors named as in the features HDF5 (`global` [B, G] for
NeuralTalk2; `regions` [B, K, D] and optionally `num_regions` [B] for AdaptiveAttention), and give

    model(images, tokens, image_rows=None)   # [N, L-1, V] log p of tokens[:, 1:]; caption n is scored under
                                             # image image_rows[n] (default: caption n under image n)
    model.init_state(images)                 # (state, static) for vltools.decoding with model.step

so that CL scores ground-truth and mismatched captions of a batch's images in one call.

Both standardise their image features first (`feature_norm="standard"`, the default since config schema 2):
x -> (x - mean) / scale per dimension, with mean and scale measured on the training images
(`Captioner.fit_features`, which the captioning task calls before training) and kept in the checkpoint. Features
whose images differ little beside their common offset otherwise reach the LSTM as nearly one vector: a random
ResNet-18's on the synthetic world have a cosine of 0.994 between any two images and an across-image variance of
0.8 % of their mean square, and both captioners learned one caption for every image. The map is affine, so the
image embedding that follows could absorb it: the model's function class is unchanged, only the scale the
optimiser sees. `feature_norm="none"` feeds the features as they are (the released code; checkpoints of schema 1).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from vltools.errors import VLToolsError
from vltools.models.decoder import Conditioning, LSTMDecoder, State

FEATURE_NORMS = ("standard", "none")
# a dimension whose spread over the training images is below this share of the mean spread is scaled as if it had
# this much (a dimension that never varies in training would otherwise multiply test-time noise without bound)
SCALE_FLOOR = 0.01


class FeatureStandardizer(nn.Module):
    """x -> (x - mean) / scale per feature dimension; `fit` measures mean and scale (buffers, saved with the
    weights) on feature rows of the training images."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    @torch.no_grad()
    def fit(self, blocks: Iterable[torch.Tensor]) -> None:
        """Set mean and standard deviation (floored at SCALE_FLOOR of their average; 1 where no dimension varies)
        from row blocks [n, dim]."""
        count, total = 0, torch.zeros_like(self.mean, dtype=torch.float64)
        squares = torch.zeros_like(total)
        for block in blocks:
            rows = block.to(total).reshape(-1, total.numel())
            count += rows.size(0)
            total += rows.sum(0)
            squares += rows.square().sum(0)
        if not count:
            raise ValueError("feature standardisation needs at least one feature row")
        mean = total / count
        std = (squares / count - mean.square()).clamp(min=0).sqrt()
        self.mean.copy_(mean)
        self.scale.copy_(std.clamp(min=SCALE_FLOOR * float(std.mean()) or 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.scale


def image_feature_norm(kind: str, dim: int) -> nn.Module:
    """The standardisation a captioner applies to its `dim` image features (`kind`: one of FEATURE_NORMS)."""
    if kind not in FEATURE_NORMS:
        raise VLToolsError(f"model.feature_norm must be one of {', '.join(FEATURE_NORMS)}, not {kind!r}")
    return FeatureStandardizer(dim) if kind == "standard" else nn.Identity()


class Captioner(nn.Module):
    """The part every captioner shares: image features -> Conditioning -> self.decoder."""

    DEFAULTS: dict[str, object] = {}
    # config schema (vltools.models.checkpoint_config): 2 since features are standardised by default; a schema-1
    # checkpoint has no feature_norm and fed them as they are
    SCHEMA = 2
    FORMER_DEFAULTS: dict[str, tuple[int, object]] = {"feature_norm": (2, "none")}
    features: tuple[str, ...] = ()   # the features HDF5 datasets the model reads
    decoder: LSTMDecoder
    norm: nn.Module

    def feature_rows(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """The feature vectors [n, img_dim] of a block of images that the standardisation sees."""
        raise NotImplementedError

    def fit_features(self, blocks: Iterable[dict[str, torch.Tensor]]) -> None:
        """Measure the feature standardisation on blocks of training images (nothing with feature_norm none)."""
        if isinstance(self.norm, FeatureStandardizer):
            self.norm.fit(self.feature_rows(images) for images in blocks)

    def conditioning(self, images: dict[str, torch.Tensor]) -> Conditioning:
        raise NotImplementedError

    def forward(self, images: dict[str, torch.Tensor], tokens: torch.Tensor,
                image_rows: torch.Tensor | None = None) -> torch.Tensor:
        cond = self.conditioning(images)
        if image_rows is not None:
            cond = cond.rows(image_rows)
        return self.decoder(cond, tokens)

    def init_state(self, images: dict[str, torch.Tensor]) -> tuple[State, State]:
        return self.decoder.init_state(self.conditioning(images))

    def step(self, tokens: torch.Tensor, state: State, static: State) -> tuple[torch.Tensor, State]:
        return self.decoder.step(tokens, state, static)


class NeuralTalk2(Captioner):
    """Karpathy & Fei-Fei / Vinyals et al.: the global image vector, linearly embedded, is the LSTM's first input."""

    DEFAULTS = {"img_dim": 2048, "embed_size": 512, "hidden_size": 512, "dropout": 0.5, "feature_norm": "standard"}
    features = ("global",)

    def __init__(self, vocab_size: int, img_dim: int = 2048, embed_size: int = 512, hidden_size: int = 512,
                 dropout: float = 0.5, feature_norm: str = "standard") -> None:
        super().__init__()
        self.img_dim = img_dim
        self.norm = image_feature_norm(feature_norm, img_dim)
        self.image_embed = nn.Linear(img_dim, embed_size)
        self.decoder = LSTMDecoder(vocab_size, embed_size, hidden_size, dropout)

    def feature_rows(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        return images["global"]

    def conditioning(self, images: dict[str, torch.Tensor]) -> Conditioning:
        return Conditioning(first_input=self.image_embed(self.norm(images["global"])))


class AdaptiveAttention(Captioner):
    """Lu et al. 2017: v_i = ReLU(W_a a_i), v_g = ReLU(W_b mean(a)); x_t = [w_t; v_g]; spatial attention with
    h_t over the v_i and the visual sentinel s_t = sigmoid(W_x x_t + W_h h_{t-1}) * tanh(m_t); p = W_p(c_t + h_t).
    """

    DEFAULTS = {"img_dim": 2048, "embed_size": 512, "hidden_size": 512, "attention_size": 512, "dropout": 0.5,
                "feature_norm": "standard"}
    features = ("regions",)

    def __init__(self, vocab_size: int, img_dim: int = 2048, embed_size: int = 512, hidden_size: int = 512,
                 attention_size: int = 512, dropout: float = 0.5, feature_norm: str = "standard") -> None:
        super().__init__()
        self.img_dim = img_dim
        self.norm = image_feature_norm(feature_norm, img_dim)
        self.region_embed = nn.Linear(img_dim, hidden_size)
        self.global_embed = nn.Linear(img_dim, embed_size)
        self.decoder = LSTMDecoder(vocab_size, embed_size, hidden_size, dropout, step_input_size=embed_size,
                                   memory_size=hidden_size, attention="output", attention_size=attention_size,
                                   sentinel=True)

    @staticmethod
    def region_mask(images: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, K], True for the real regions (the first num_regions of each image; all without num_regions)."""
        regions, counts = images["regions"], images.get("num_regions")
        if counts is None:
            return torch.ones(regions.shape[:2], dtype=torch.bool, device=regions.device)
        return torch.arange(regions.size(1), device=regions.device).unsqueeze(0) < counts.unsqueeze(1)

    def feature_rows(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        return images["regions"][self.region_mask(images)]

    def conditioning(self, images: dict[str, torch.Tensor]) -> Conditioning:
        regions = self.norm(images["regions"])
        mask = self.region_mask(images)
        counts = mask.sum(1)
        mean = (regions * mask.unsqueeze(2)).sum(1) / counts.clamp(min=1).unsqueeze(1).to(regions.dtype)
        return Conditioning(step_input=torch.relu(self.global_embed(mean)),
                            memory=torch.relu(self.region_embed(regions)), memory_mask=mask)
