"""SGR and SAF (Diao et al., AAAI 2021) computing what the authors' released code computes, batched.

The released code scores one caption at a time against a block of images.  Here a block of images is
scored against a block of captions at once: captions are grouped by length, padded words are masked out
of every step that mixes words (the per-region l2-normalisation over words, TextSA's mean and softmax,
the graph softmax of SGR, SAF's l1-normalisation), and the results agree with the per-caption
computation to float rounding.  Submodule names follow the released code, so an official state dict
loads with the prefixes `img_enc.`, `txt_enc.` and `sim_enc.`.

Images with fewer real regions than the feature file's K: `encode_images` zeroes the rows of padded
regions, VisualSA treats all-zero rows as absent (a real region's embedding is never exactly zero), and
the word-to-region attention needs no mask (see `EncoderSimilarity.attend`); so slices of image
embeddings carry their own mask.  (In training, VisualSA's BatchNorm over region positions still counts
padded positions in its batch statistics, as any position-wise BatchNorm would.)

Where the computation is rearranged for speed the algebra is exact and noted in place: the SGR edge
logits (`GraphReasoning`), the attended image's l2norm moved past the local linear map
(`EncoderSimilarity.nodes`), and only the global node computed in the last SGR step.  In training, the
steps over the large [images, captions, words, embed] tensors (attend, subtract the word, square, project)
are one autograd function with a hand-written backward (`LocalSimilarity`), which keeps fewer of those
tensors and passes over them fewer times; its gradients equal autograd's to float rounding.  SAF's BatchNorm in
training normalises each caption on its own, as the per-caption loop of the released code does.  Inference (eval
mode, no gradients, fp32) runs `EncoderSimilarity.block_scores`, the same computation arranged for the CPU's
caches: captions grouped by exact length (no padding, no masks), passes small enough to stay in cache, reused
buffers, the attended image's norm from the regions' Gram matrix, no concatenation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from vltools.errors import VLToolsError

# cap on the elements of one [images, captions, words, embed] intermediate (fp32: 4 bytes each)
CHUNK_ELEMENTS = 1 << 25
# inference on the CPU: elements of the [rows, embed] intermediate of one pass of the kernel (fp32: 16 MB), written
# into reused buffers (see `EncoderSimilarity.block_scores`). 2^22 against 2^20 on a 2-core Xeon with AVX-512
# (kernel alone, 64 x 256 at official sizes): SGR 0.096 / 0.104 ms per pair on 2 threads, 0.175 / 0.181 on one;
# SAF 0.049 / 0.058 and 0.090 / 0.097 (2^23 was slower again)
CACHE_ELEMENTS = 1 << 22
# False: inference takes the general path that training uses (benchmarks/match_sgraf.py's baseline)
BLOCK_KERNEL = True


def _wide(x: torch.Tensor) -> torch.Tensor:
    """`x` in float32 when autocast made it float16 or bfloat16, else as it is (float32 and float64 unchanged).

    What divides by a norm runs in float32: in float16 the eps 1e-8 is zero, so a zero row (a padded region, its
    word logits) became 0 / 0 = NaN, and the squares of a 1024-d norm overflow past 65504."""
    return x.float() if torch.finfo(x.dtype).bits < 32 else x


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """x / (||x||_2 + eps) along `dim`, the released code's normalisation (eps added, not clamped); computed in
    float32 under autocast (`_wide`), returned in x's dtype."""
    wide = _wide(x)
    return (wide / (torch.linalg.vector_norm(wide, dim=dim, keepdim=True) + eps)).to(x.dtype)


def l1norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """x / (sum |x| + eps) along `dim`; computed in float32 under autocast (`_wide`), returned in x's dtype."""
    wide = _wide(x)
    return (wide / (wide.abs().sum(dim=dim, keepdim=True) + eps)).to(x.dtype)


def xavier_(linear: nn.Linear) -> None:
    """The released code's init of a linear layer: uniform(+-sqrt(6 / (in + out))), zero bias."""
    r = math.sqrt(6.0) / math.sqrt(linear.in_features + linear.out_features)
    nn.init.uniform_(linear.weight, -r, r)
    nn.init.zeros_(linear.bias)


def _scratch(x: torch.Tensor) -> bool:
    """Whether the intermediate `x` may be overwritten: nothing records it for a backward pass."""
    return not (torch.is_grad_enabled() and x.requires_grad)


def _l2norm_temp(x: torch.Tensor) -> torch.Tensor:
    """`l2norm(x)` of an intermediate, in place when that is safe (inference in float32), saving memory traffic."""
    if _scratch(x) and _wide(x) is x:
        return x.div_(torch.linalg.vector_norm(x, dim=-1, keepdim=True).add_(1e-8))
    return l2norm(x)


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu_(x) if _scratch(x) else torch.relu(x)


class _Workspace:
    """Named flat buffers reused by every pass of one `block_scores` call (grown when a pass needs more).

    A fresh multi-megabyte tensor per product is a fresh mapping of zeroed pages on the CPU, and writing it
    first costs page faults: the attended-image product [16, 1000, 36] x [16, 36, 1024] ran at 17 GFLOP/s into
    a fresh tensor and at 53 GFLOP/s into a reused one (one thread, AMD EPYC).
    """

    def __init__(self, like: torch.Tensor) -> None:
        self.like = like
        self.buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, *shape: int) -> torch.Tensor:
        size = math.prod(shape)
        flat = self.buffers.get(name)
        if flat is None or flat.numel() < size:
            flat = self.like.new_empty(size)
            self.buffers[name] = flat
        return flat[:size].view(shape)


def length_mask(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """Bool [B, size]: True at the first lengths[b] positions of row b."""
    return torch.arange(size, device=lengths.device) < lengths.to(torch.long).unsqueeze(1)


def region_mask(img_emb: torch.Tensor) -> torch.Tensor:
    """Bool [B, K]: True for real regions (padded regions are all-zero rows, see `encode_images`)."""
    return img_emb.ne(0).any(dim=-1)


class EncoderImage(nn.Module):
    """Regions [B, K, D] -> fc -> l2norm: local region embeddings [B, K, E]."""

    def __init__(self, img_dim: int, embed_size: int, no_imgnorm: bool = False) -> None:
        super().__init__()
        self.no_imgnorm = no_imgnorm
        self.fc = nn.Linear(img_dim, embed_size)
        xavier_(self.fc)

    def forward(self, regions: torch.Tensor) -> torch.Tensor:
        emb = self.fc(regions)
        return emb if self.no_imgnorm else l2norm(emb)


class EncoderText(nn.Module):
    """Word ids [B, L] -> embedding -> dropout -> (Bi)GRU, directions averaged -> l2norm: [B, L, E]."""

    def __init__(self, vocab_size: int, word_dim: int, embed_size: int, num_layers: int,
                 use_bi_gru: bool = True, no_txtnorm: bool = False, dropout: float = 0.4) -> None:
        super().__init__()
        self.no_txtnorm = no_txtnorm
        self.use_bi_gru = use_bi_gru
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.dropout = nn.Dropout(dropout)
        self.cap_rnn = nn.GRU(word_dim, embed_size, num_layers, batch_first=True, bidirectional=use_bi_gru)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def run(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GRU outputs [B, L, H * directions] (zero past each length) and final states [layers * dirs, B, H]."""
        emb = self.dropout(self.embed(tokens))
        packed = pack_padded_sequence(emb, lengths.detach().to("cpu", torch.long), batch_first=True,
                                      enforce_sorted=False)
        out, last = self.cap_rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        return out, last

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out, _ = self.run(tokens, lengths)
        if self.use_bi_gru:
            half = out.size(2) // 2
            out = (out[:, :, :half] + out[:, :, half:]) / 2
        return out if self.no_txtnorm else l2norm(out)


class VisualSA(nn.Module):
    """Global image by self-attention over regions, the region mean as query; BatchNorm over K positions."""

    def __init__(self, embed_dim: int, dropout_rate: float, num_region: int) -> None:
        super().__init__()
        self.embedding_local = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.BatchNorm1d(num_region),
                                             nn.Tanh(), nn.Dropout(dropout_rate))
        self.embedding_global = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.BatchNorm1d(embed_dim),
                                              nn.Tanh(), nn.Dropout(dropout_rate))
        self.embedding_common = nn.Sequential(nn.Linear(embed_dim, 1))
        for layer in (self.embedding_local[0], self.embedding_global[0], self.embedding_common[0]):
            xavier_(layer)

    def forward(self, local: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """local [B, K, E] (padded rows zero), mask [B, K] -> l2-normalised global image [B, E]."""
        num_region = self.embedding_local[1].num_features
        if local.size(1) != num_region:
            raise VLToolsError(f"the images have {local.size(1)} regions each but the model was built for "
                               f"num_regions={num_region}; use features with {num_region} regions per image "
                               "or train a model with this num_regions")
        raw_global = local.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        weights = self.embedding_common(self.embedding_local(local) * self.embedding_global(raw_global).unsqueeze(1))
        weights = weights.squeeze(2).masked_fill(~mask, float("-inf")).softmax(dim=1)
        return l2norm((weights.unsqueeze(2) * local).sum(1))


class TextSA(nn.Module):
    """Global caption by self-attention over its real words, the word mean as query."""

    def __init__(self, embed_dim: int, dropout_rate: float) -> None:
        super().__init__()
        self.embedding_local = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.Tanh(), nn.Dropout(dropout_rate))
        self.embedding_global = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.Tanh(), nn.Dropout(dropout_rate))
        self.embedding_common = nn.Sequential(nn.Linear(embed_dim, 1))
        for layer in (self.embedding_local[0], self.embedding_global[0], self.embedding_common[0]):
            xavier_(layer)

    def forward(self, local: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """local [B, L, E], lengths [B] -> l2-normalised global caption [B, E]."""
        mask = length_mask(lengths, local.size(1))
        local = local * mask.unsqueeze(2)
        raw_global = local.sum(1) / mask.sum(1, keepdim=True)
        weights = self.embedding_common(self.embedding_local(local) * self.embedding_global(raw_global).unsqueeze(1))
        weights = weights.squeeze(2).masked_fill(~mask, float("-inf")).softmax(dim=1)
        return l2norm((weights.unsqueeze(2) * local).sum(1))


class GraphReasoning(nn.Module):
    """One SGR step over the similarity graph: N <- relu(W_g (softmax((W_q N + b_q)(W_k N + b_k)^T) N)).

    The edge logits are computed as (N M + u) N^T + c with M = W_q^T W_k, u = W_k^T b_q, c = b_q . b_k:
    one sim_dim x sim_dim product per node instead of two.  They differ from the released logits only by
    N W_q^T b_k, constant along the softmax's (key) axis, so the edges are the same; c is constant too,
    and is kept so that b_k stays in the graph (every parameter takes part, as DistributedDataParallel needs).
    """

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.graph_query_w = nn.Linear(sim_dim, sim_dim)
        self.graph_key_w = nn.Linear(sim_dim, sim_dim)
        self.sim_graph_w = nn.Linear(sim_dim, sim_dim)
        for layer in (self.graph_query_w, self.graph_key_w, self.sim_graph_w):
            xavier_(layer)

    def _query_map(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(M^T, u, c): queries N M + u = linear(N, M^T, u)."""
        wq, bq = self.graph_query_w.weight, self.graph_query_w.bias
        wk, bk = self.graph_key_w.weight, self.graph_key_w.bias
        return wk.t() @ wq, wk.t() @ bq, bq @ bk

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [P, N, S], mask [P, N] (False = padded node) -> new nodes [P, N, S]."""
        m_t, u, c = self._query_map()
        logits = torch.bmm(F.linear(nodes, m_t, u), nodes.transpose(1, 2)) + c
        edges = logits.masked_fill_(~mask.unsqueeze(1), float("-inf")).softmax(dim=-1)
        return _relu(self.sim_graph_w(torch.bmm(edges, nodes)))

    def first_node(self, nodes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Row 0 of `forward` only (the global node, all that the last step's output is used for): [P, S]."""
        m_t, u, c = self._query_map()
        query = F.linear(nodes[:, 0], m_t, u)
        logits = torch.bmm(nodes, query.unsqueeze(2)).squeeze(2) + c
        edges = logits.masked_fill_(~mask, float("-inf")).softmax(dim=-1)
        return _relu(self.sim_graph_w(torch.bmm(edges.unsqueeze(1), nodes).squeeze(1)))


class AttentionFiltration(nn.Module):
    """SAF: beta = l1norm(sigmoid(BN_1(w_a . N))) over real nodes, s = l2norm(sum_p beta_p N_p)."""

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.attn_sim_w = nn.Linear(sim_dim, 1)
        self.bn = nn.BatchNorm1d(1)
        xavier_(self.attn_sim_w)

    def forward(self, nodes: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """nodes [Bi, Bc, N, S], mask [Bc, N] -> (vectors [Bi, Bc, S], per-caption BN stats or None).

        In training the released code batch-normalises each caption's logits on their own (over the
        images and that caption's nodes); the same is done here, and the statistics ([2, Bc]: mean,
        unbiased variance) are returned so that the caller can update the running averages in
        caption order once the whole batch is scored.
        """
        logits = self.attn_sim_w(nodes).squeeze(-1)
        n_img, n_cap, n_node = logits.shape
        stats = None
        if self.bn.training:
            normed, stats = self._per_caption_bn(logits, mask)
        else:
            normed = self.bn(logits.reshape(-1, 1, n_node)).reshape(n_img, n_cap, n_node)
        beta = l1norm(torch.sigmoid(normed) * mask, dim=-1)
        pooled = torch.bmm(beta.reshape(-1, 1, n_node), nodes.reshape(-1, n_node, nodes.size(-1)))
        return l2norm(pooled.view(*beta.shape[:2], -1)), stats

    def _per_caption_bn(self, logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weight = mask.to(logits.dtype)
        count = weight.sum(-1) * logits.size(0)
        mean = (logits * weight).sum((0, 2)) / count
        centred = (logits - mean[:, None]) * weight
        var = centred.pow(2).sum((0, 2)) / count
        normed = (logits - mean[:, None]) / torch.sqrt(var[:, None] + self.bn.eps)
        normed = normed * self.bn.weight + self.bn.bias
        return normed, torch.stack([mean, var * count / (count - 1)]).detach()

    @torch.no_grad()
    def update_running_stats(self, stats: torch.Tensor) -> None:
        """Apply one BatchNorm momentum update per caption, in order (stats [2, n_captions])."""
        n = stats.size(1)
        keep = 1.0 - self.bn.momentum
        powers = keep ** torch.arange(n - 1, -1, -1, device=stats.device, dtype=stats.dtype)
        for buffer, values in ((self.bn.running_mean, stats[0]), (self.bn.running_var, stats[1])):
            buffer.mul_(keep ** n).add_((self.bn.momentum * powers * values).sum())
        self.bn.num_batches_tracked.add_(n)


class LocalSimilarity(torch.autograd.Function):
    """W (l2norm(u) - t)^2 without bias, for training: the [Bi, Bc, L, E] steps fused with a hand-written backward.

    Inputs: alpha [Bi, K, Bc * L] (attention), v [Bi, K, E] (regions), t [Bc, L, E] (words), W [S, E].
    With u = alpha^T v (attended image), n = |u| + 1e-8 and d = u - n t, the output is (d^2 W^T) / n^2
    (= W (u / n - t)^2).  Autograd through the plain expression would keep three [Bi, Bc, L, E] tensors
    and make about ten passes over such tensors in the backward pass; here the forward pass turns u into d
    in place and keeps d and d^2, and the backward pass makes one [Bi, Bc, L, E] gradient and updates it in
    place (the gradient through n uses u = d + n t, so u itself is not kept).

    Under autocast everything runs in autocast's dtype, with autocast itself off inside: its op lists differ by
    device (CUDA computes the norm in float32, the CPU in bf16), and a float32 tensor meeting a bf16 one in the
    hand-written backward's products would fail there, where no autocast applies.
    """

    @staticmethod
    def forward(ctx, alpha: torch.Tensor, regions: torch.Tensor, words: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        device = regions.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else regions.dtype
        with torch.autocast(device, enabled=False):
            return LocalSimilarity.compute(ctx, *(t.to(dtype) for t in (alpha, regions, words, weight)))

    @staticmethod
    def compute(ctx, alpha: torch.Tensor, regions: torch.Tensor, words: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        """The forward pass on inputs of one dtype."""
        n_img, n_cap, n_word = regions.size(0), words.size(0), words.size(1)
        diff = torch.bmm(alpha.transpose(1, 2), regions).view(n_img, n_cap, n_word, -1)
        norm = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
        scale = norm + 1e-8
        diff.addcmul_(words, scale, value=-1)
        square = diff.square()
        out = F.linear(square, weight).div_(scale.square())
        ctx.save_for_backward(alpha, regions, words, weight, diff, square, norm, out)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        alpha, regions, words, weight, diff, square, norm, out = ctx.saved_tensors
        grad_out = grad_out.to(diff.dtype)
        scale = norm + 1e-8
        grad_proj = grad_out / scale.square()
        grad_weight = grad_proj.reshape(-1, grad_proj.size(-1)).t() @ square.reshape(-1, square.size(-1))
        # d(out)/d(scale) through the division by scale^2
        grad_scale = (grad_out * out).sum(-1, keepdim=True).mul_(-2).div_(scale)
        grad_diff = F.linear(grad_proj.mul_(2), weight.t()).mul_(diff)            # [Bi, Bc, L, E]
        grad_words = -torch.einsum("icl,icle->cle", scale.squeeze(-1), grad_diff)
        grad_scale -= torch.einsum("icle,cle->icl", grad_diff, words).unsqueeze(-1)
        # scale = |u| + eps with u = d + scale * t: d|u|/du = u / |u|
        factor = grad_scale / norm.clamp(min=torch.finfo(norm.dtype).tiny)
        grad_diff.addcmul_(diff, factor).addcmul_(words, factor * scale)
        grad_u = grad_diff.view(regions.size(0), -1, regions.size(-1))
        grad_alpha = torch.bmm(regions, grad_u.transpose(1, 2))                   # [Bi, K, Bc * L]
        grad_regions = torch.bmm(alpha, grad_u)
        return grad_alpha, grad_regions, grad_words, grad_weight


class EncoderSimilarity(nn.Module):
    """Similarity representations (local + global) and their SGR or SAF aggregation into a score."""

    def __init__(self, embed_size: int, sim_dim: int, module_name: str, sgr_step: int, num_regions: int,
                 lambda_softmax: float, dropout: float) -> None:
        super().__init__()
        self.module_name = module_name
        self.lambda_softmax = lambda_softmax
        self.v_global_w = VisualSA(embed_size, dropout, num_regions)
        self.t_global_w = TextSA(embed_size, dropout)
        self.sim_tranloc_w = nn.Linear(embed_size, sim_dim)
        self.sim_tranglo_w = nn.Linear(embed_size, sim_dim)
        self.sim_eval_w = nn.Linear(sim_dim, 1)
        for layer in (self.sim_tranloc_w, self.sim_tranglo_w, self.sim_eval_w):
            xavier_(layer)
        if module_name == "SGR":
            if sgr_step < 1:
                raise VLToolsError(f"sgr_step must be at least 1, got {sgr_step}")
            self.SGR_module = nn.ModuleList([GraphReasoning(sim_dim) for _ in range(sgr_step)])
        elif module_name == "SAF":
            self.SAF_module = AttentionFiltration(sim_dim)
        else:
            raise VLToolsError(f"module_name must be SGR or SAF, got {module_name!r}")

    def attention(self, img_emb: torch.Tensor, cap_emb: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Word-to-region attention (SCAN t2i): [Bi, K, E] x [Bc, L, E] -> alpha [Bi, K, Bc * L].

        a = leaky_relu(v_k . t_w, 0.1), l2-normalised over the caption's real words for each region,
        alpha = softmax(lambda * a) over regions; the attended image is c_w = l2norm(u_w), u_w = sum_k alpha_kw v_k.
        A padded region (zero row) adds nothing to u, and the l2norm removes the rescaling its weight
        causes, so it needs no mask.
        """
        n_img, n_reg, dim = img_emb.shape
        n_cap, n_word, _ = cap_emb.shape
        logits = (img_emb.reshape(-1, dim) @ cap_emb.reshape(-1, dim).t()).view(n_img, n_reg, n_cap, n_word)
        logits = F.leaky_relu(logits, 0.1) * word_mask
        return (l2norm(logits, dim=-1) * self.lambda_softmax).softmax(dim=1).view(n_img, n_reg, n_cap * n_word)

    def attend(self, img_emb: torch.Tensor, cap_emb: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Attended image per word before its l2norm: u [Bi, Bc, L, E] (see `attention`)."""
        alpha = self.attention(img_emb, cap_emb, word_mask)
        return torch.bmm(alpha.transpose(1, 2), img_emb).view(img_emb.size(0), *cap_emb.shape)

    def nodes(self, img_emb: torch.Tensor, img_glo: torch.Tensor, cap_emb: torch.Tensor, word_mask: torch.Tensor,
              cap_glo: torch.Tensor) -> torch.Tensor:
        """Similarity graph nodes [Bi, Bc, 1 + L, S]: global s_g then local s_1..s_L (padded words garbage)."""
        loc = self.sim_tranloc_w
        if torch.is_grad_enabled() and any(t.requires_grad for t in (img_emb, cap_emb, loc.weight)):
            alpha = self.attention(img_emb, cap_emb, word_mask)
            sim_loc = l2norm(LocalSimilarity.apply(alpha, img_emb, cap_emb, loc.weight) + loc.bias)
        else:
            weighted = self.attend(img_emb, cap_emb, word_mask)
            norm = torch.linalg.vector_norm(_wide(weighted), dim=-1, keepdim=True) + 1e-8
            # with c = u / n, (c - t)^2 = (u - n t)^2 / n^2: the division by n^2 moves past the linear map onto
            # its 256-d output, which saves a pass over the large [Bi, Bc, L, E] tensor (under autocast the
            # division runs in float32, where n^2 neither underflows nor meets a zero eps)
            difference = weighted.addcmul_(cap_emb, norm.to(weighted.dtype), value=-1).square_()
            sim_loc = _l2norm_temp(torch.addcdiv(loc.bias, _wide(F.linear(difference, loc.weight)), norm.square()))
        sim_glo = _l2norm_temp(self.sim_tranglo_w((img_glo.unsqueeze(1) - cap_glo.unsqueeze(0)).pow(2)))
        return torch.cat([sim_glo.unsqueeze(2), sim_loc], dim=2)

    def score(self, nodes: torch.Tensor, node_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Nodes [Bi, Bc, N, S], node_mask [Bc, N] -> (scores [Bi, Bc] in (0, 1), SAF batch stats or None)."""
        n_img, n_cap, n_node, dim = nodes.shape
        stats = None
        if self.module_name == "SGR":
            flat = nodes.reshape(n_img * n_cap, n_node, dim)
            mask = node_mask.expand(n_img, n_cap, n_node).reshape(-1, n_node)
            for step in self.SGR_module[:-1]:
                flat = step(flat, mask)
            vec = self.SGR_module[-1].first_node(flat, mask).view(n_img, n_cap, dim)
        else:
            vec, stats = self.SAF_module(nodes, node_mask)
        # the score head runs in float32 even under bf16 autocast: bf16 steps of 1/256 near 0.5 would tie ranks
        with torch.autocast(vec.device.type, enabled=False):
            return torch.sigmoid(self.sim_eval_w(vec.float())).squeeze(-1), stats

    def global_images(self, img_emb: torch.Tensor) -> torch.Tensor:
        """Global images [Bi, E] (VisualSA); in eval mode each depends on its own image only."""
        return self.v_global_w(img_emb, region_mask(img_emb))

    def global_captions(self, cap_emb: torch.Tensor, cap_lengths: torch.Tensor) -> torch.Tensor:
        """Global captions [Bc, E] (TextSA over each caption's real words)."""
        return self.t_global_w(cap_emb, cap_lengths.to(device=cap_emb.device, dtype=torch.long))

    def inference_kernel(self, img_emb: torch.Tensor, lengths: torch.Tensor) -> bool:
        """Whether `forward` runs `block_scores`: eval mode, no gradients, no autocast, every caption non-empty
        (and `BLOCK_KERNEL` on)."""
        return (BLOCK_KERNEL and not self.training and not torch.is_grad_enabled() and img_emb.dtype == torch.float32
                and not torch.is_autocast_enabled(img_emb.device.type) and bool((lengths > 0).all()))

    def block_scores(self, img_emb: torch.Tensor, img_glo: torch.Tensor, cap_emb: torch.Tensor,
                     lengths: torch.Tensor, cap_glo: torch.Tensor) -> torch.Tensor:
        """Inference scores [Bi, Bc]: what `nodes` + `score` compute, with nothing done between the products
        that a profile showed to cost (padding, copies, concatenation, masks, fresh allocations).

        - Captions are grouped by exact length, so no group has padded words: no word or node mask, and no
          product over padding (a block's longest caption no longer sets every caption's length).
        - Each group is scored in passes of a few images x captions whose [rows, embed] intermediate fits in
          `CACHE_ELEMENTS` (on the CPU), written into buffers reused by every pass.
        - The attended image's norm comes from the image's region Gram matrix G = V V^T, computed once per
          block: |u|^2 = alpha^T G alpha.  Knowing it before u is formed, one product writes u - n t into a
          buffer holding n t (beta = -1), instead of a product, a norm pass and a subtraction pass.
        - The local nodes are written (bias, division by n^2) straight into the graph's node buffer, after the
          global node: no concatenation.  The graph's edge logits take u . n_k as the product's initial value
          (no bias copy) and drop the constant c (softmax does not see it).
        Equal to the general path to float rounding (tests/test_models_sgraf.py).
        """
        n_img, n_reg, dim = img_emb.shape
        out = img_emb.new_empty(n_img, cap_emb.size(0))
        work = _Workspace(img_emb)
        gram = torch.bmm(img_emb, img_emb.transpose(1, 2))                       # [Bi, K, K]
        budget = min(CHUNK_ELEMENTS, CACHE_ELEMENTS if img_emb.device.type == "cpu" else CHUNK_ELEMENTS)
        rows = max(1, budget // dim)
        order = torch.argsort(lengths, stable=True)
        sorted_lengths = lengths[order].tolist()
        graph = self._graph_maps()
        start = 0
        while start < len(order):
            n_word = sorted_lengths[start]
            stop = start + 1
            while stop < len(order) and sorted_lengths[stop] == n_word:
                stop += 1
            per_chunk = max(1, rows // n_word)
            for first in range(start, stop, per_chunk):
                idx = order[first:min(stop, first + per_chunk)]
                words = cap_emb[idx, :n_word].reshape(-1, dim)                   # [g * L, E], once per chunk
                step = max(1, rows // words.size(0))
                for i in range(0, n_img, step):
                    part = slice(i, min(n_img, i + step))
                    nodes = self._block_nodes(img_emb[part], gram[part], img_glo[part], words, len(idx),
                                              cap_glo[idx], work)
                    out[part].index_copy_(1, idx, self._block_vectors_score(nodes, graph, work))
            start = stop
        return out

    def _graph_maps(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per SGR step, (M^T, u) of `GraphReasoning._query_map` (c is dropped: constant along the softmax)."""
        if self.module_name != "SGR":
            return []
        return [step._query_map()[:2] for step in self.SGR_module]

    def _block_nodes(self, img: torch.Tensor, gram: torch.Tensor, img_glo: torch.Tensor, words: torch.Tensor,
                     n_cap: int, cap_glo: torch.Tensor, work: _Workspace) -> torch.Tensor:
        """l2-normalised nodes [b, g, 1 + L, S] of b images against g captions of L words each (no padding)."""
        n_img, n_reg, dim = img.shape
        n_rows = words.size(0)
        n_word = n_rows // n_cap
        loc, glo = self.sim_tranloc_w, self.sim_tranglo_w
        sim_dim = loc.out_features
        # attention: a = leaky_relu(v . t), l2norm over each caption's words, softmax(lambda a) over regions
        logits = torch.mm(img.reshape(-1, dim), words.t(), out=work.take("logits", n_img * n_reg, n_rows))
        logits = F.leaky_relu_(logits, 0.1).view(n_img * n_reg, n_cap, n_word)
        logits.div_(torch.linalg.vector_norm(logits, dim=-1, keepdim=True).add_(1e-8)).mul_(self.lambda_softmax)
        alpha = logits.view(n_img, n_reg, n_rows).softmax(dim=1)                  # [b, K, g * L]
        # |u|^2 = alpha^T G alpha, then d = u - n t in one product, squared in place, mapped to S
        norm = torch.bmm(gram, alpha).mul_(alpha).sum(1).clamp_(min=0).sqrt_().add_(1e-8).unsqueeze(2)
        diff = torch.mul(words, norm, out=work.take("diff", n_img, n_rows, dim))
        diff.baddbmm_(alpha.transpose(1, 2), img, beta=-1).square_()
        local = torch.mm(diff.view(-1, dim), loc.weight.t(), out=work.take("local", n_img * n_rows, sim_dim))
        nodes = work.take("nodes", n_img, n_cap, n_word + 1, sim_dim)
        torch.addcdiv(loc.bias, local.view(n_img, n_cap, n_word, sim_dim), norm.square_().view(n_img, n_cap, n_word, 1),
                      out=nodes[:, :, 1:])
        gap = (img_glo.unsqueeze(1) - cap_glo.unsqueeze(0)).square_()           # [b, g, E]
        nodes[:, :, 0] = F.linear(gap, glo.weight, glo.bias)
        return nodes.div_(torch.linalg.vector_norm(nodes, dim=-1, keepdim=True).add_(1e-8))

    def _block_vectors_score(self, nodes: torch.Tensor, graph: list[tuple[torch.Tensor, torch.Tensor]],
                             work: _Workspace) -> torch.Tensor:
        """Scores [b, g] of the nodes [b, g, N, S] of `_block_nodes` (SGR steps or SAF, then the score head)."""
        n_img, n_cap, n_node, dim = nodes.shape
        flat = nodes.view(-1, n_node, dim)
        if self.module_name == "SGR":
            rows = flat.view(-1, dim)
            for step, (m_t, u) in zip(self.SGR_module[:-1], graph[:-1], strict=True):
                query = torch.mm(rows, m_t.t(), out=work.take("query", *rows.shape)).view_as(flat)
                # logits_ik = (n_i M + u) . n_k: u . n_k enters as the product's initial value
                logits = torch.baddbmm(torch.mv(rows, u).view(-1, 1, n_node), query, flat.transpose(1, 2))
                mixed = torch.bmm(logits.softmax(dim=-1), flat, out=work.take("mixed", *flat.shape))
                torch.addmm(step.sim_graph_w.bias, mixed.view(-1, dim), step.sim_graph_w.weight.t(), out=rows)
                rows.relu_()
            last, (m_t, u) = self.SGR_module[-1], graph[-1]
            query = torch.addmm(u, flat[:, 0], m_t.t())
            edges = torch.bmm(flat, query.unsqueeze(2)).squeeze(2).softmax(dim=-1)
            vec = torch.relu_(last.sim_graph_w(torch.bmm(edges.unsqueeze(1), flat).squeeze(1)))
        else:
            saf = self.SAF_module
            logits = saf.attn_sim_w(flat).view(-1, 1, n_node)
            beta = l1norm(torch.sigmoid_(saf.bn(logits)), dim=-1)
            vec = l2norm(torch.bmm(beta, flat).squeeze(1))
        return torch.sigmoid_(self.sim_eval_w(vec)).view(n_img, n_cap)

    def forward(self, img_emb: torch.Tensor, cap_emb: torch.Tensor, cap_lengths: torch.Tensor,
                img_glo: torch.Tensor | None = None, cap_glo: torch.Tensor | None = None) -> torch.Tensor:
        """Scores [Bi, Bc] of every image against every caption, captions grouped by length in chunks.

        `img_glo` / `cap_glo`: the global vectors when the caller has them already (reranking scores each
        query against a few candidates many times; recomputing the self-attention would dominate its time).
        """
        img_glo = self.global_images(img_emb) if img_glo is None else img_glo
        lengths = cap_lengths.to(device=cap_emb.device, dtype=torch.long)
        cap_glo = self.global_captions(cap_emb, lengths) if cap_glo is None else cap_glo
        if self.inference_kernel(img_emb, lengths):
            return self.block_scores(img_emb, img_glo, cap_emb, lengths, cap_glo)
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order].tolist()
        parts, all_stats = [], []
        start = 0
        while start < len(order):
            n_word = sorted_lengths[start]
            stop = start + max(1, CHUNK_ELEMENTS // max(1, img_emb.size(0) * n_word * img_emb.size(2)))
            idx = order[start:stop]
            word_mask = length_mask(lengths[idx], n_word)
            nodes = self.nodes(img_emb, img_glo, cap_emb[idx, :n_word], word_mask, cap_glo[idx])
            node_mask = torch.cat([word_mask.new_ones(len(idx), 1), word_mask], dim=1)
            scores, stats = self.score(nodes, node_mask)
            parts.append(scores)
            if stats is not None:
                all_stats.append(stats)
            start = stop
        inverse = torch.argsort(order)
        if all_stats:
            self.SAF_module.update_running_stats(torch.cat(all_stats, dim=1)[:, inverse])
        return torch.cat(parts, dim=1)[:, inverse]


class SGRAFModel(nn.Module):
    """Image encoder + text encoder + similarity encoder (`img_enc`, `txt_enc`, `sim_enc`, as released)."""

    separable = False
    module_name = ""
    DEFAULTS: dict = {
        "img_dim": 2048, "embed_size": 1024, "word_dim": 300, "sim_dim": 256, "num_layers": 1,
        "bi_gru": True, "no_imgnorm": False, "no_txtnorm": False, "num_regions": 36,
        "lambda_softmax": 9.0, "dropout": 0.4,
    }

    def __init__(self, vocab_size: int, img_dim: int, embed_size: int, word_dim: int, sim_dim: int,
                 num_layers: int, bi_gru: bool, no_imgnorm: bool, no_txtnorm: bool, num_regions: int,
                 lambda_softmax: float, dropout: float, sgr_step: int = 0) -> None:
        super().__init__()
        self.img_enc = EncoderImage(img_dim, embed_size, no_imgnorm)
        self.txt_enc = EncoderText(vocab_size, word_dim, embed_size, num_layers, bi_gru, no_txtnorm, dropout)
        self.sim_enc = EncoderSimilarity(embed_size, sim_dim, self.module_name, sgr_step, num_regions,
                                         lambda_softmax, dropout)

    def encode_images(self, regions: torch.Tensor, num_regions: torch.Tensor | None = None) -> torch.Tensor:
        """Regions [B, K, D] -> [B, K, E]; rows of padded regions (index >= num_regions) are zero."""
        emb = self.img_enc(regions)
        if num_regions is not None:
            emb = emb * length_mask(num_regions.to(emb.device), emb.size(1)).unsqueeze(2).to(emb.dtype)
        return emb

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Word ids [B, L] (<start> ... <end>, 0-padded) -> word embeddings [B, L, E], zero past each length."""
        return self.txt_enc(tokens, lengths)

    def similarity(self, img_emb: torch.Tensor, cap_emb: torch.Tensor, cap_lengths: torch.Tensor,
                   img_glo: torch.Tensor | None = None, cap_glo: torch.Tensor | None = None) -> torch.Tensor:
        """Every image against every caption: [Bi, K, E] x [Bc, L, E] -> [Bi, Bc] (globals: see EncoderSimilarity)."""
        return self.sim_enc(img_emb, cap_emb, cap_lengths, img_glo, cap_glo)

    def global_images(self, img_emb: torch.Tensor) -> torch.Tensor:
        """Global images [Bi, E] for `similarity(..., img_glo=)` (in eval mode each depends on its image only)."""
        return self.sim_enc.global_images(img_emb)

    def global_captions(self, cap_emb: torch.Tensor, cap_lengths: torch.Tensor) -> torch.Tensor:
        """Global captions [Bc, E] for `similarity(..., cap_glo=)`."""
        return self.sim_enc.global_captions(cap_emb, cap_lengths)

    def forward(self, regions: torch.Tensor, num_regions: torch.Tensor | None, tokens: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        """Training: scores [B, B] of the batch's images (rows) against its captions (columns)."""
        return self.similarity(self.encode_images(regions, num_regions), self.encode_captions(tokens, lengths),
                               lengths)


class SGR(SGRAFModel):
    """Similarity Graph Reasoning: score from the global node after `sgr_step` graph steps."""

    module_name = "SGR"
    DEFAULTS = {**SGRAFModel.DEFAULTS, "sgr_step": 3}


class SAF(SGRAFModel):
    """Similarity Attention Filtration: score from the attention-weighted sum of the nodes."""

    module_name = "SAF"
