"""L2C (Yan et al. 2021, "L2C: Describing Visual Differences Needs Semantic Understanding of Individuals").

The encoder turns a backbone feature map F (D, H, W) and a foreground mask B (H, W) into K nodes:
semantic pooling (conv 3x3 + BatchNorm + ReLU + conv 1x1 into K maps, softmax over K) gives the
confidence map C, and node k is v_k = sum over pixels of F * B * C_k (Eq. 1, `node_norm="sum"`, the default).
`node_norm="area"` divides it by the mask's area sum B, a per-image constant the paper leaves out (vltools'
option: it keeps the nodes at the scale of F, where the plain sum grows with the bird's size and the map's
resolution). The total-variation norm of C (Eq. 2) regularises it. The nodes are projected to the
graph dimension and refined by a GCN over the fully connected graph with affinity A_ij = (W_i v_i)^T (W_j v_j)
(Eq. 3). A pair is described from the node differences v_k(a) - v_k(b), a single image from its own nodes; the
LSTM decoder (shared by both tasks) attends over the K nodes at every step.

Variants (the paper's baselines and ablations) are config switches:
`pooling` semantic | masked_average (Table 3 "- Semantic Pooling": one node, the mask-weighted mean of F)
| global (CNN+LSTM: one node, the plain mean of F); `gcn_steps` 0 for "- GCN"; `compare` difference |
concat (CNN+LSTM reads both images' nodes side by side). The TV weight is a task setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vltools.errors import VLToolsError
from vltools.models.decoder import Conditioning, LSTMDecoder

POOLINGS = ("semantic", "masked_average", "global")
NODE_NORMS = ("sum", "area")
COMPARES = ("difference", "concat")


def semantic_nodes(featmap: torch.Tensor, mask: torch.Tensor, confidence: torch.Tensor) -> torch.Tensor:
    """Eq. 1: (B, D, H, W) features, (B, H, W) mask, (B, K, H, W) confidences -> (B, K, D) nodes,
    v_k = sum_ij F_ij * B_ij * C_k,ij."""
    return torch.einsum("bdhw,bhw,bkhw->bkd", featmap, mask, confidence)


def masked_average_nodes(featmap: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One node per image, the mask-weighted mean of F: (B, 1, D); an empty mask gives a zero node."""
    total = torch.einsum("bdhw,bhw->bd", featmap, mask)
    area = mask.sum(dim=(1, 2)).clamp(min=1e-6)
    return (total / area[:, None]).unsqueeze(1)


def total_variation(confidence: torch.Tensor) -> torch.Tensor:
    """Eq. 2 per image: sum over k, i, j of |C_k,i+1,j - C_k,i,j| + |C_k,i,j+1 - C_k,i,j|; (B, K, H, W) -> (B,)."""
    down = (confidence[:, :, 1:, :] - confidence[:, :, :-1, :]).abs().sum(dim=(1, 2, 3))
    right = (confidence[:, :, :, 1:] - confidence[:, :, :, :-1]).abs().sum(dim=(1, 2, 3))
    return down + right


class SemanticPooling(nn.Module):
    """Pixel-wise soft assignment to K classes: conv 3x3 + BatchNorm + ReLU + conv 1x1, softmax over K."""

    def __init__(self, in_dim: int, num_nodes: int = 9, hidden: int = 512) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_dim, hidden, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(hidden)
        self.classify = nn.Conv2d(hidden, num_nodes, kernel_size=1)

    def forward(self, featmap: torch.Tensor) -> torch.Tensor:
        """(B, D, H, W) -> confidence map C (B, K, H, W), each pixel a distribution over K."""
        return self.classify(F.relu(self.bn(self.conv(featmap)))).softmax(dim=1)


class GraphReasoning(nn.Module):
    """GCN steps over a fully connected graph of nodes: A = (W_i V)(W_j V)^T (Eq. 3), each row normalised
    by a softmax (the affinity is unbounded, so Kipf and Welling's degree normalisation does not apply),
    then V <- V + relu(W_g (A V)). This update is vltools' own (the paper gives none): VSRN's graph reasoning
    divides A by the number of nodes instead of a softmax and adds W_g (A V) through BatchNorm, without ReLU."""

    def __init__(self, dim: int, steps: int = 1) -> None:
        super().__init__()
        self.query = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(steps))
        self.key = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(steps))
        self.update = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(steps))

    def affinity(self, nodes: torch.Tensor, step: int = 0) -> torch.Tensor:
        """(B, K, G) -> (B, K, K) row-normalised adjacency of step `step`."""
        return (self.query[step](nodes) @ self.key[step](nodes).transpose(1, 2)).softmax(dim=-1)

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        for step in range(len(self.update)):
            nodes = nodes + F.relu(self.update[step](self.affinity(nodes, step) @ nodes))
        return nodes


class L2CEncoder(nn.Module):
    """Feature map + mask -> relation-enhanced nodes (B, K, graph_dim) and the TV norm of C per image."""

    def __init__(self, feature_dim: int, num_nodes: int = 9, pool_hidden: int = 512, graph_dim: int = 512,
                 gcn_steps: int = 1, pooling: str = "semantic", node_norm: str = "sum") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        if node_norm not in NODE_NORMS:
            raise ValueError(f"node_norm must be one of {NODE_NORMS}, not {node_norm!r}")
        self.pooling_kind, self.node_norm = pooling, node_norm
        self.pool = SemanticPooling(feature_dim, num_nodes, pool_hidden) if pooling == "semantic" else None
        self.project = nn.Linear(feature_dim, graph_dim)
        self.graph = GraphReasoning(graph_dim, gcn_steps)

    @property
    def num_nodes(self) -> int:
        return self.pool.classify.out_channels if self.pool is not None else 1

    def pool_nodes(self, featmap: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(nodes (B, K, D) before projection, TV norm (B,); zeros without semantic pooling)."""
        if self.pool is None:
            zeros = featmap.new_zeros(featmap.shape[0])
            if self.pooling_kind == "global":
                return featmap.mean(dim=(2, 3)).unsqueeze(1), zeros
            return masked_average_nodes(featmap, mask), zeros
        confidence = self.pool(featmap)
        nodes = semantic_nodes(featmap, mask, confidence)
        if self.node_norm == "area":
            # the option: nodes at the scale of F whatever the bird's size (they sum to the masked average); an
            # empty mask gives zeros
            nodes = nodes / mask.sum(dim=(1, 2)).clamp(min=1e-6)[:, None, None]
        return nodes, total_variation(confidence)

    def forward(self, featmap: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nodes, tv = self.pool_nodes(featmap, mask)
        return self.graph(self.project(nodes)), tv


def difference_nodes(nodes_a: torch.Tensor, nodes_b: torch.Tensor) -> torch.Tensor:
    """V_diff: v_k(a) - v_k(b) for each node k (Section 2.2)."""
    return nodes_a - nodes_b


@dataclass
class L2COutput:
    """Log-probabilities of the pairs' descriptions [P, L-1, V] and the single images' captions [S, L-1, V]
    (None without single images), and the TV norm of every encoded image [2P + S]."""

    pair_logp: torch.Tensor
    single_logp: torch.Tensor | None
    tv: torch.Tensor


class L2C(nn.Module):
    """Encoder (pooling, GCN) + one LSTM decoder attending over the nodes, for pairs and single images."""

    DEFAULTS: dict[str, object] = {
        "feature_dim": 2048,       # D of the feature maps (ResNet-101: 2048); filled in from the features file
        "num_nodes": 9,            # K
        "pool_hidden": 512,        # channels of the pooling module's conv 3x3
        "graph_dim": 512,
        "gcn_steps": 1,            # 0: no GCN (Table 3)
        "pooling": "semantic",     # semantic | masked_average (Table 3) | global (CNN+LSTM)
        "node_norm": "sum",        # sum: Eq. 1 as printed | area: divided by the mask's area (vltools' option)
        "compare": "difference",   # difference | concat (CNN+LSTM: both images' nodes side by side)
        "embed_size": 512,
        "hidden_size": 512,
        "attention_size": 512,
        "dropout": 0.5,
    }
    # config schema (vltools.models.checkpoint_config): 2 since Eq. 1 pools as printed by default (node_norm sum);
    # a schema-1 checkpoint has no node_norm and always divided the nodes by the mask's area
    SCHEMA = 2
    FORMER_DEFAULTS: dict[str, tuple[int, object]] = {"node_norm": (2, "area")}

    def __init__(self, vocab_size: int, **config: object) -> None:
        super().__init__()
        unknown = sorted(set(config) - set(self.DEFAULTS))
        if unknown:
            raise VLToolsError(f"model l2c has no setting {', '.join(unknown)}; its settings are "
                               f"{', '.join(self.DEFAULTS)}")
        c = {**self.DEFAULTS, **config}
        if c["compare"] not in COMPARES:
            raise VLToolsError(f"model.compare must be one of {', '.join(COMPARES)}, not {c['compare']!r}")
        if c["pooling"] not in POOLINGS:
            raise VLToolsError(f"model.pooling must be one of {', '.join(POOLINGS)}, not {c['pooling']!r}")
        if c["node_norm"] not in NODE_NORMS:
            raise VLToolsError(f"model.node_norm must be one of {', '.join(NODE_NORMS)}, not {c['node_norm']!r}")
        self.compare = c["compare"]
        self.encoder = L2CEncoder(c["feature_dim"], c["num_nodes"], c["pool_hidden"], c["graph_dim"],
                                  c["gcn_steps"], c["pooling"], c["node_norm"])
        self.decoder = LSTMDecoder(vocab_size, embed_size=c["embed_size"], hidden_size=c["hidden_size"],
                                   dropout=c["dropout"], memory_size=c["graph_dim"], attention="input",
                                   attention_size=c["attention_size"])

    def encode(self, featmap_a: torch.Tensor, mask_a: torch.Tensor, featmap_b: torch.Tensor, mask_b: torch.Tensor,
               featmap: torch.Tensor | None = None, mask: torch.Tensor | None = None
               ) -> tuple[Conditioning, torch.Tensor]:
        """The decoder's memory for P pairs (node differences, or both node sets) then S single images (their
        nodes; padded and masked when pairs have more nodes), all images through the encoder at once (one set
        of BatchNorm statistics); and the TV norms [2P + S]."""
        pairs = featmap_a.shape[0]
        featmaps, masks = [featmap_a, featmap_b], [mask_a, mask_b]
        if featmap is not None:
            featmaps.append(featmap)
            masks.append(mask)
        nodes, tv = self.encoder(torch.cat(featmaps), torch.cat(masks))
        a, b, single = nodes[:pairs], nodes[pairs:2 * pairs], nodes[2 * pairs:]
        pair_memory = difference_nodes(a, b) if self.compare == "difference" else torch.cat([a, b], dim=1)
        valid = torch.ones(nodes.shape[0] - pairs, pair_memory.shape[1], dtype=torch.bool, device=nodes.device)
        if single.shape[1] < pair_memory.shape[1]:
            valid[pairs:, single.shape[1]:] = False
            single = F.pad(single, (0, 0, 0, pair_memory.shape[1] - single.shape[1]))
        memory = torch.cat([pair_memory, single])
        return Conditioning(memory=memory, memory_mask=valid if not valid.all() else None), tv

    def forward(self, featmap_a: torch.Tensor, mask_a: torch.Tensor, featmap_b: torch.Tensor, mask_b: torch.Tensor,
                tokens: torch.Tensor, featmap: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                single_tokens: torch.Tensor | None = None) -> L2COutput:
        """Teacher-forced log-probabilities of the pairs' `tokens` [P, L] and the single images' `single_tokens`
        [S, L'] (both `<start> ... <end>` padded with 0), one decoder pass over both."""
        cond, tv = self.encode(featmap_a, mask_a, featmap_b, mask_b, featmap, mask)
        pairs = tokens.shape[0]
        if single_tokens is not None:
            length = max(tokens.shape[1], single_tokens.shape[1])
            tokens = torch.cat([F.pad(tokens, (0, length - tokens.shape[1])),
                                F.pad(single_tokens, (0, length - single_tokens.shape[1]))])
        logp = self.decoder(cond, tokens)
        if single_tokens is None:
            return L2COutput(logp, None, tv)
        return L2COutput(logp[:pairs], logp[pairs:], tv)

