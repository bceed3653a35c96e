"""Image captioners of Dai & Lin's experiments: NeuralTalk2 and AdaptiveAttention, over the shared LSTMDecoder.

Both take `images`, a dict of feature tensors named as in the features HDF5 (`global` [B, G] for
NeuralTalk2; `regions` [B, K, D] and optionally `num_regions` [B] for AdaptiveAttention), and give

    model(images, tokens, image_rows=None)   # [N, L-1, V] log p of tokens[:, 1:]; caption n is scored under
                                             # image image_rows[n] (default: caption n under image n)
    model.init_state(images)                 # (state, static) for vltools.decoding with model.step

so that CL scores ground-truth and mismatched captions of a batch's images in one call.
"""

from __future__ import annotations

import torch
from torch import nn

from vltools.models.decoder import Conditioning, LSTMDecoder, State


class Captioner(nn.Module):
    """The part every captioner shares: image features -> Conditioning -> self.decoder."""

    DEFAULTS: dict[str, object] = {}
    features: tuple[str, ...] = ()   # the features HDF5 datasets the model reads
    decoder: LSTMDecoder

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

    DEFAULTS = {"img_dim": 2048, "embed_size": 512, "hidden_size": 512, "dropout": 0.5}
    features = ("global",)

    def __init__(self, vocab_size: int, img_dim: int = 2048, embed_size: int = 512, hidden_size: int = 512,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.img_dim = img_dim
        self.image_embed = nn.Linear(img_dim, embed_size)
        self.decoder = LSTMDecoder(vocab_size, embed_size, hidden_size, dropout)

    def conditioning(self, images: dict[str, torch.Tensor]) -> Conditioning:
        return Conditioning(first_input=self.image_embed(images["global"]))


class AdaptiveAttention(Captioner):
    """Lu et al. 2017: v_i = ReLU(W_a a_i), v_g = ReLU(W_b mean(a)); x_t = [w_t; v_g]; spatial attention with
    h_t over the v_i and the visual sentinel s_t = sigmoid(W_x x_t + W_h h_{t-1}) * tanh(m_t); p = W_p(c_t + h_t).
    """

    DEFAULTS = {"img_dim": 2048, "embed_size": 512, "hidden_size": 512, "attention_size": 512, "dropout": 0.5}
    features = ("regions",)

    def __init__(self, vocab_size: int, img_dim: int = 2048, embed_size: int = 512, hidden_size: int = 512,
                 attention_size: int = 512, dropout: float = 0.5) -> None:
        super().__init__()
        self.img_dim = img_dim
        self.region_embed = nn.Linear(img_dim, hidden_size)
        self.global_embed = nn.Linear(img_dim, embed_size)
        self.decoder = LSTMDecoder(vocab_size, embed_size, hidden_size, dropout, step_input_size=embed_size,
                                   memory_size=hidden_size, attention="output", attention_size=attention_size,
                                   sentinel=True)

    def conditioning(self, images: dict[str, torch.Tensor]) -> Conditioning:
        regions = images["regions"]
        counts = images.get("num_regions")
        if counts is None:
            counts = torch.full((regions.size(0),), regions.size(1), device=regions.device)
        mask = torch.arange(regions.size(1), device=regions.device).unsqueeze(0) < counts.unsqueeze(1)
        mean = (regions * mask.unsqueeze(2)).sum(1) / counts.clamp(min=1).unsqueeze(1).to(regions.dtype)
        return Conditioning(step_input=torch.relu(self.global_embed(mean)),
                            memory=torch.relu(self.region_embed(regions)), memory_mask=mask)
