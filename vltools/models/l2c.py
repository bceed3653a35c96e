"""L2C (Yan et al. 2021, "L2C: Describing Visual Differences Needs Semantic Understanding of Individuals").

The encoder turns a backbone feature map F (D, H, W) and a foreground mask B (H, W) into K nodes:
semantic pooling (conv 3x3 + BatchNorm + ReLU + conv 1x1 into K maps, softmax over K) gives the
confidence map C, and node k is v_k = sum over pixels of F * B * C_k (Eq. 1); the total-variation norm
of C (Eq. 2) regularises it. The nodes are projected to the graph dimension and refined by a GCN over the
fully connected graph with affinity A_ij = (W_i v_i)^T (W_j v_j) (Eq. 3). A pair is described from the
node differences v_k(a) - v_k(b), a single image from its own nodes; the LSTM decoder (shared by both
tasks) attends over the K nodes at every step.

Variants (the paper's baselines and ablations) are config switches:
`pooling` semantic | masked_average (Table 3 "- Semantic Pooling": one node, the mask-weighted mean of F)
| global (CNN+LSTM: one node, the plain mean of F); `gcn_steps` 0 for "- GCN"; `compare` difference |
concat (CNN+LSTM reads both images' nodes side by side). The TV weight is a task setting.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

POOLINGS = ("semantic", "masked_average", "global")
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
    then V <- V + relu(W_g (A V)) (residual, as in VSRN's graph reasoning that the paper follows)."""

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
                 gcn_steps: int = 1, pooling: str = "semantic") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        self.pooling_kind = pooling
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
        # Eq. 1 is a sum over pixels; dividing by H * W (a constant) keeps the projection's input scale
        # independent of the feature map size
        nodes = semantic_nodes(featmap, mask, confidence) / (featmap.shape[2] * featmap.shape[3])
        return nodes, total_variation(confidence)

    def forward(self, featmap: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nodes, tv = self.pool_nodes(featmap, mask)
        return self.graph(self.project(nodes)), tv


def difference_nodes(nodes_a: torch.Tensor, nodes_b: torch.Tensor) -> torch.Tensor:
    """V_diff: v_k(a) - v_k(b) for each node k (Section 2.2)."""
    return nodes_a - nodes_b
