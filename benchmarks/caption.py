"""Benchmark of captioning: vltools' batched beam search against a per-image beam-search loop, `caption --logp`
throughput, and one MLE and one CL training step.

Same random AdaptiveAttention weights and random spatial features for everything:
  - batched: vltools.decoding.beam_search over all images and beams at once (blocks of --batch-size images);
  - per-image: the loop written below, one image at a time (its beams batched), with the same rules (finished
    hypotheses stay in the beam at no cost, <end> forced after max_len words, <pad>/<start> never generated);
    both times, their ratio (target >= 5x on a 2-core CPU) and how many captions are identical;
  - logp: vltools.infer.caption.logp_matrix pairs per second on --logp-images x --logp-captions, and the
    growth of peak resident memory while it runs;
  - one optimizer step (Adam) of MLE and of CL (K = 5 negative sets, frozen reference) on a batch of 50 captions.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/caption.py [--images 500] [--beam 3] [--vocab 9487] [--hidden 512] [--logp-images 100]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vltools.decoding import beam_search
from vltools.infer.caption import logp_matrix
from vltools.infer.loader import LoadedModel
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.losses import contrastive_objective, sequence_cross_entropy, sequence_logprob
from vltools.models.captioners import AdaptiveAttention
from vltools.text.captions import CaptionPreprocessing
from vltools.text.vocab import SPECIALS


def per_image_beam(model: AdaptiveAttention, images: dict, beam: int, max_len: int) -> list[list[int]]:
    """The reference: each image on its own, its `beam` hypotheses as the rows of one step call."""
    results = []
    for i in range(images["regions"].size(0)):
        one = {k: v[i:i + 1] for k, v in images.items()}
        state, static = model.init_state(one)
        state = {k: v.expand(beam, *v.shape[1:]).contiguous() for k, v in state.items()}
        static = {k: v.expand(beam, *v.shape[1:]).contiguous() for k, v in static.items()}
        words = torch.full((beam,), 1, dtype=torch.long)
        scores = torch.tensor([0.0] + [float("-inf")] * (beam - 1))
        done = torch.zeros(beam, dtype=torch.bool)
        history: list[list[int]] = [[] for _ in range(beam)]
        for position in range(max_len + 1):
            logp, state = model.step(words, state, static)
            logp = logp.float().clone()
            if position == max_len:
                logp[:, :2] = float("-inf")
                logp[:, 3:] = float("-inf")
            else:
                logp[:, :2] = float("-inf")
            logp[done] = float("-inf")
            logp[done, 0] = 0.0
            flat = (scores.unsqueeze(1) + logp).view(-1)
            scores, chosen = flat.topk(beam)
            origin, words = chosen // logp.size(1), chosen % logp.size(1)
            state = {k: v[origin] for k, v in state.items()}
            history = [history[o] + [int(w)] for o, w in zip(origin.tolist(), words.tolist(), strict=True)]
            done = done[origin] | (words == 2)
            if bool(done.all()):
                break
        best = history[0]
        results.append([w for w in best if w != 0])
    return results


def batched_beam(model: AdaptiveAttention, images: dict, beam: int, max_len: int, batch: int) -> list[list[int]]:
    results = []
    for start in range(0, images["regions"].size(0), batch):
        chunk = {k: v[start:start + batch] for k, v in images.items()}
        out = beam_search(model.step, *model.init_state(chunk), beam_size=beam, max_len=max_len)
        results += [[w for w in row if w != 0] for row in out.tokens.tolist()]
    return results


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--beam", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=9487, help="words (COCO Karpathy, min count 5: 9487)")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--grid", type=int, default=49, help="spatial features per image (7 x 7)")
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=100, help="images per batched beam search call")
    parser.add_argument("--logp-images", type=int, default=100, help="1000 x 1000 takes hours on a 2-core CPU")
    parser.add_argument("--logp-captions", type=int, default=100)
    parser.add_argument("--skip-logp", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = AdaptiveAttention(args.vocab, img_dim=args.dim, embed_size=args.hidden, hidden_size=args.hidden,
                              attention_size=args.hidden, dropout=0.5).eval()
    regions = torch.randn(args.images, args.grid, args.dim, generator=torch.Generator().manual_seed(1)).relu()
    images = {"regions": regions}
    print(f"CPU: {platform.processor() or platform.machine()}, torch threads: {torch.get_num_threads()}, "
          f"AdaptiveAttention hidden {args.hidden}, vocab {args.vocab}, {args.grid} x {args.dim} features")
    with torch.inference_mode():
        start, cpu = time.perf_counter(), time.process_time()
        batched = batched_beam(model, images, args.beam, args.max_len, args.batch_size)
        batched_s, batched_cpu = time.perf_counter() - start, time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        reference = per_image_beam(model, images, args.beam, args.max_len)
        per_image_s, per_image_cpu = time.perf_counter() - start, time.process_time() - cpu
    identical = sum(a == b for a, b in zip(batched, reference, strict=True))
    lengths = np.mean([len(c) for c in batched])
    print(f"beam {args.beam}, {args.images} images (mean length {lengths:.1f} tokens): batched {batched_s:.2f} s, "
          f"per-image loop {per_image_s:.2f} s, speed-up {per_image_s / batched_s:.2f}x (CPU seconds {batched_cpu:.2f} "
          f"and {per_image_cpu:.2f}: {per_image_cpu / batched_cpu:.2f}x), identical captions {identical}/{args.images}")
    result = {"images": args.images, "beam": args.beam, "batched_s": batched_s, "per_image_s": per_image_s,
              "speedup": per_image_s / batched_s, "batched_cpu_s": batched_cpu, "per_image_cpu_s": per_image_cpu,
              "cpu_speedup": per_image_cpu / batched_cpu, "identical": identical, "threads": torch.get_num_threads()}

    if not args.skip_logp:
        words = [*SPECIALS, *(f"w{i}" for i in range(args.vocab - len(SPECIALS)))]
        rng = np.random.default_rng(2)
        captions = [" ".join(rng.choice(words[4:], size=rng.integers(8, 14))) for _ in range(args.logp_captions)]
        prep = {"train_state": {"config": {"task": CaptionPreprocessing(min_count=1).config()}}}
        loaded = LoadedModel(Path("benchmark"), "adaptive-attention", model, words, {}, prep)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "feats.h5"
            ids = [f"i{n}" for n in range(args.logp_images)]
            feats = torch.randn(args.logp_images, args.grid, args.dim, generator=torch.Generator().manual_seed(3))
            with FeaturesWriter(path, {"backbone": "random"}, dtype="float32") as writer:
                writer.add(ids, regions=feats.relu().numpy())
            before = peak_rss_mb()
            with FeaturesReader(path) as reader:
                start = time.perf_counter()
                logp_matrix(loaded, reader, ids, captions, quiet=True)
                logp_s = time.perf_counter() - start
        pairs = args.logp_images * args.logp_captions
        print(f"caption --logp: {args.logp_images} x {args.logp_captions} = {pairs} pairs in {logp_s:.1f} s, "
              f"{pairs / logp_s:.0f} pairs/s, peak RSS growth {peak_rss_mb() - before:.0f} MB")
        result.update(logp_pairs=pairs, logp_s=logp_s, logp_pairs_per_s=pairs / logp_s,
                      logp_peak_rss_growth_mb=peak_rss_mb() - before)

    model.train()
    reference_model = AdaptiveAttention(args.vocab, img_dim=args.dim, embed_size=args.hidden,
                                        hidden_size=args.hidden, attention_size=args.hidden).eval()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-6)
    gen = torch.Generator().manual_seed(4)
    feats = {"regions": torch.randn(50, args.grid, args.dim, generator=gen).relu()}
    tokens = torch.randint(4, args.vocab, (300, 18), generator=gen)
    tokens[:, 0], tokens[:, -1] = 1, 2
    for name in ("MLE", "CL"):
        times = []
        for _ in range(2):
            start = time.perf_counter()
            optimizer.zero_grad()
            if name == "MLE":
                loss = sequence_cross_entropy(model(feats, tokens[:50]), tokens[:50, 1:])
            else:
                rows = torch.arange(50).repeat(6)
                target = sequence_logprob(model(feats, tokens, rows), tokens[:, 1:])
                with torch.no_grad():
                    ref = sequence_logprob(reference_model(feats, tokens, rows), tokens[:, 1:])
                loss = -contrastive_objective(target[:50], ref[:50], target[50:].view(5, 50), ref[50:].view(5, 50))
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
        step = min(times)
        print(f"{name} training step, batch of 50 captions (length 17): {step:.2f} s (best of 2)")
        result[f"{name.lower()}_step_s"] = step
    print(json.dumps(result))


if __name__ == "__main__":
    main()
