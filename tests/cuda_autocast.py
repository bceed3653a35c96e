"""CUDA's autocast op lists, as far as they differ from the CPU's, emulated on a CPU for tests.

Under CUDA autocast, norms, softmax, reductions, exponentials and the losses return float32 even from bf16 / fp16
inputs; the CPU's autocast leaves most of them in the low precision. Code that trains under the CPU's autocast may
still meet a float32 tensor and a bf16 one in one product on a GPU (the failure of issue 37). Within
`cuda_float32_ops()`, those functions called while autocast is on return float32, as they would on CUDA.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# the "CUDA ops that can autocast to float32" of torch's autocast documentation, by the names torch functions carry
CUDA_FLOAT32_OPS = frozenset({
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits", "cosh",
    "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum", "dist", "erfinv",
    "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm", "log", "log_softmax",
    "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss", "multilabel_margin_loss", "multi_margin_loss",
    "nll_loss", "norm", "linalg_vector_norm", "normalize", "pdist", "poisson_nll_loss", "pow", "prod", "reciprocal",
    "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus", "sum", "renorm", "tan",
    "triplet_margin_loss",
})
LOW = (torch.bfloat16, torch.float16)


class cuda_float32_ops(TorchFunctionMode):  # noqa: N801 (used as a context manager, like torch.autocast)
    """Within: CUDA_FLOAT32_OPS return float32 while the CPU's autocast is on (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if (getattr(func, "__name__", "") in CUDA_FLOAT32_OPS and torch.is_autocast_enabled("cpu")
                and isinstance(result, torch.Tensor) and result.dtype in LOW):
            return result.float()
        return result
