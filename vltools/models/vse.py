"""VSE++ (Faghri et al., 2018): separable global embeddings for first-stage retrieval.

Image: the mean of the image's real region features -> fc -> l2norm (the precomputed-feature variant).
Caption: word embedding -> GRU, state at the last real word (directions averaged if bidirectional)
-> l2norm.  Similarity is the cosine, so a gallery can be embedded once and searched by inner product.
"""

from __future__ import annotations

import torch
from torch import nn

from vltools.models.sgraf import EncoderImage, EncoderText, l2norm, length_mask


class VSE(nn.Module):
    """Global image and caption embeddings in one space; similarity = img @ cap.T."""

    separable = True
    DEFAULTS: dict = {
        "img_dim": 2048, "embed_size": 1024, "word_dim": 300, "num_layers": 1, "bi_gru": False,
        "no_imgnorm": False, "no_txtnorm": False, "dropout": 0.0,
    }

    def __init__(self, vocab_size: int, img_dim: int, embed_size: int, word_dim: int, num_layers: int,
                 bi_gru: bool, no_imgnorm: bool, no_txtnorm: bool, dropout: float) -> None:
        super().__init__()
        self.no_imgnorm = no_imgnorm
        self.no_txtnorm = no_txtnorm
        self.img_enc = EncoderImage(img_dim, embed_size, no_imgnorm=True)
        self.txt_enc = EncoderText(vocab_size, word_dim, embed_size, num_layers, bi_gru, no_txtnorm=True,
                                   dropout=dropout)

    def encode_images(self, regions: torch.Tensor, num_regions: torch.Tensor | None = None) -> torch.Tensor:
        """Regions [B, K, D] -> l2-normalised [B, E] (fc of the mean over the real regions)."""
        if num_regions is None:
            pooled = regions.mean(1)
        else:
            mask = length_mask(num_regions.to(regions.device), regions.size(1)).unsqueeze(2).to(regions.dtype)
            pooled = (regions * mask).sum(1) / mask.sum(1).clamp(min=1)
        emb = self.img_enc(pooled)
        return emb if self.no_imgnorm else l2norm(emb)

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Word ids [B, L] -> l2-normalised [B, E]: the GRU state after the last real word."""
        _, last = self.txt_enc.run(tokens, lengths)
        emb = (last[-2] + last[-1]) / 2 if self.txt_enc.use_bi_gru else last[-1]
        return emb if self.no_txtnorm else l2norm(emb)

    def similarity(self, img_emb: torch.Tensor, cap_emb: torch.Tensor,
                   cap_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Cosine similarity [Bi, Bc] (inner product of the normalised embeddings)."""
        return img_emb @ cap_emb.t()

    def forward(self, regions: torch.Tensor, num_regions: torch.Tensor | None, tokens: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        """Training: scores [B, B] of the batch's images (rows) against its captions (columns)."""
        return self.similarity(self.encode_images(regions, num_regions), self.encode_captions(tokens, lengths))
