"""Benchmark of SCO's stages (random weights, synthetic inputs; the machine and thread count are printed):

  - concept scoring: images/s of `ConceptScorer` (r regions cut by RoIAlign from a batch of images and scored
    through the CNN as one batch, max over regions) against the CNN's forward alone on the same crops cut
    beforehand; their ratio (target >= 0.8);
  - one SCO training step (cnp + ctx + gen, paper sizes: H 1024, D 300, K 256, context 2048, vocabulary 10k,
    captions of 12 words, batch 128, the 128-negative hinge and the generation loss, backward, Adam);
  - encode throughput of images (context + concepts) and captions;
  - search of 5k image embeddings against 25k caption embeddings (1024-d): exact top-10 (vltools.infer.topk)
    both ways, time and the peak resident memory, and FAISS flat inner product when faiss is installed.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/sco.py [--images 16] [--regions 50] [--crop 224] [--backbone resnet18] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import torch
from machine import cpu_model

from vltools.infer.concept_scores import ConceptScorer, crop_regions, grid_windows
from vltools.infer.settings import RunOptions
from vltools.infer.topk import faiss_available, search
from vltools.losses import sampled_hinge_loss, sequence_cross_entropy
from vltools.models.concepts import build_concept_cnn
from vltools.models.sco import SCO
from vltools.vision.backbones import normalize


def timed(fn, repeat: int = 3) -> float:
    """Best CPU-independent wall time of `repeat` calls (after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def concept_scoring(args) -> dict:
    levels = {50: (1, 2, 3, 6), 14: (1, 2, 3), 5: (1, 2)}[args.regions]
    model, _ = build_concept_cnn(args.backbone, "none", 256)
    scorer = ConceptScorer(model.eval(), {}, RunOptions(device="cpu"), args.image_size, args.crop, levels)
    images = torch.randint(0, 255, (args.images, 3, args.image_size, args.image_size), dtype=torch.uint8)
    samples = [{"image": image, "orig_size": (args.image_size, args.image_size)} for image in images]
    crops = crop_regions(normalize(images), grid_windows(args.image_size, args.image_size, levels), args.crop)
    flat = crops.flatten(0, 1)
    with torch.inference_mode():
        stage = timed(lambda: scorer(samples, []), args.repeat)
        alone = timed(lambda: [model(flat[i:i + 256]) for i in range(0, len(flat), 256)], args.repeat)
    return {"images": args.images, "regions": len(crops[0]), "crop": args.crop, "backbone": args.backbone,
            "stage_images_per_s": args.images / stage, "backbone_images_per_s": args.images / alone,
            "ratio": alone / stage}


def training_step(args) -> dict:
    torch.manual_seed(0)
    vocab, batch, words = 10000, 128, 12
    model = SCO(vocab, 2048, 256, True, True, "gate", 1024, 300, 50, True, False, 0.0, 0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    context, concepts = torch.randn(batch, 2048), torch.rand(batch, 256)
    tokens = torch.randint(4, vocab, (batch, words + 2))
    tokens[:, 0], tokens[:, -1] = 1, 2
    lengths = torch.full((batch,), words + 2)

    def step() -> None:
        optimizer.zero_grad()
        sims, logp = model(context, concepts, tokens, lengths)
        loss = sampled_hinge_loss(sims, 0.2, 128) + sequence_cross_entropy(logp, tokens[:, 1:], reduction="sum")
        loss.backward()
        optimizer.step()

    step_s = timed(step, args.repeat)
    model.eval()
    big_context, big_concepts = torch.randn(1024, 2048), torch.rand(1024, 256)
    big_tokens = torch.randint(4, vocab, (1024, words + 2))
    big_lengths = torch.full((1024,), words + 2)
    with torch.inference_mode():
        images_s = timed(lambda: model.encode_images(big_context, big_concepts), args.repeat)
        captions_s = timed(lambda: model.encode_captions(big_tokens, big_lengths), args.repeat)
    return {"train_step_s": step_s, "batch": batch, "encode_images_per_s": 1024 / images_s,
            "encode_captions_per_s": 1024 / captions_s}


def search_5k_25k(args) -> dict:
    rng = np.random.default_rng(0)
    images = rng.standard_normal((5000, 1024), dtype=np.float32)
    captions = rng.standard_normal((25000, 1024), dtype=np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    start = time.perf_counter()
    search(images, captions, 10)
    search(captions, images, 10)
    exact = time.perf_counter() - start
    out = {"exact_s": exact, "rss_before_gb": before,
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "embeddings_gb": (images.nbytes + captions.nbytes) / 2**30}
    if faiss_available():
        start = time.perf_counter()
        search(images, captions, 10, index="Flat")
        search(captions, images, 10, index="Flat")
        out["faiss_flat_s"] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--regions", type=int, choices=(5, 14, 50), default=50)
    parser.add_argument("--image-size", type=int, default=448)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--skip-search", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "concepts": concept_scoring(args),
              "sco": training_step(args)}
    if not args.skip_search:
        result["search"] = search_5k_25k(args)
    c = result["concepts"]
    print(f"CPU {result['cpu']}, {result['threads']} thread(s)")
    print(f"concept scoring ({c['backbone']}, {c['regions']} regions of {c['crop']} px): stage "
          f"{c['stage_images_per_s']:.2f} images/s, CNN alone on the same crops {c['backbone_images_per_s']:.2f} "
          f"images/s, ratio {c['ratio']:.2f} (target >= 0.8)")
    s = result["sco"]
    print(f"SCO training step, batch {s['batch']} (paper sizes, with generation): {s['train_step_s']:.2f} s; "
          f"encode {s['encode_images_per_s']:.0f} images/s, {s['encode_captions_per_s']:.0f} captions/s")
    if "search" in result:
        m = result["search"]
        print(f"5k x 25k exact top-10 both ways: {m['exact_s']:.2f} s, peak RSS {m['peak_rss_gb']:.2f} GB "
              f"(embeddings {m['embeddings_gb']:.2f} GB)" +
              (f"; FAISS flat {m['faiss_flat_s']:.2f} s" if "faiss_flat_s" in m else "; FAISS not installed"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
