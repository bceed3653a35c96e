"""Image-text matching at inference time: blocked similarity matrices, top-k search, two-stage reranking."""
