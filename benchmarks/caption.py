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
With `--peer` (only that part): vltools' `caption_batches` (features read from an HDF5 file, decoded to text)
against a batched beam search with the structure of self-critical.pytorch's `CaptionModel.beam_search`
(`self_critical_beam` below) on the same blocks of the same file, at each of `--peer-beams`, timed in this
process's CPU seconds (use `--threads 1` on a shared machine), with the FLOP floor of a caption.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/caption.py [--images 500] [--beam 3] [--vocab 9487] [--hidden 512] [--logp-images 100]
    python benchmarks/caption.py --peer --images 300 --peer-beams 3,5 --threads 1 [--end-bias 0] [--peer-profile]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model

from vltools.data.captioning import image_tensors
from vltools.decoding import beam_search
from vltools.decoding.search import END_ID, NEVER, START_ID
from vltools.infer.caption import caption_batches, logp_matrix
from vltools.infer.loader import LoadedModel
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.losses import contrastive_objective, sequence_cross_entropy, sequence_logprob
from vltools.models.captioners import AdaptiveAttention
from vltools.text.captions import CaptionPreprocessing, decode
from vltools.text.vocab import SPECIALS, Vocabulary


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


def self_critical_beam(model: AdaptiveAttention, images: dict, beam: int, max_len: int,
                       keep_logps: bool = True) -> list[list[int]]:
    """A batched beam search with the structure of self-critical.pytorch's `CaptionModel.beam_search` (one group,
    no diversity term, no length penalty), written here from its published algorithm:

    - the first step runs on the images alone (one row each) and its state is then spread over the beams;
    - each step adds the beams' summed log-probabilities to the next word's, sorts each image's beam x vocab
      candidates (a full descending sort) and keeps the first `beam`; sequences and states follow their beam by
      gathers, and with `keep_logps` (as published) each beam also keeps every step's full-vocabulary log-probs;
    - a beam that emits <end> (or every beam at the last step) is copied, in a Python loop over images and beams,
      to that image's finished list, and its sum is lowered by 1000 so that open beams take its place;
    - the answer is the finished hypothesis with the highest summed log-probability.

    Rules as in vltools' search, so that the two agree where the algorithms do: <pad>/<start> never generated
    and only <end> allowed after `max_len` words (self-critical instead stops after `seq_length` steps).
    """
    n_img = images["regions"].size(0)
    state, static = model.init_state(images)
    logp, state = model.step(torch.full((n_img,), START_ID, dtype=torch.long), state, static)
    static = {k: v.repeat_interleave(beam, 0) for k, v in static.items()}
    seq = torch.zeros(n_img, beam, 0, dtype=torch.long)
    seq_logps = torch.zeros(n_img, beam, 0, logp.size(1))
    sums = torch.zeros(n_img, beam)
    done: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(n_img)]
    offsets = torch.arange(n_img).unsqueeze(1)
    for t in range(max_len + 1):
        vocab = logp.size(1)
        logp = logp.float().clone()
        if t == max_len:
            logp[:, :END_ID] = float("-inf")
            logp[:, END_ID + 1:] = float("-inf")
        else:
            logp[:, list(NEVER)] = float("-inf")
        logp = logp.view(n_img, -1, vocab)
        current = sums[:, :1] if t == 0 else sums
        candidates = (current.unsqueeze(-1) + logp).view(n_img, -1)
        ys, ix = torch.sort(candidates, -1, True)
        ix = ix[:, :beam]
        beam_ix, word = ix // vocab, ix % vocab
        state_ix = (beam_ix + offsets * logp.size(1)).view(-1)
        if t > 0:
            seq = seq.gather(1, beam_ix.unsqueeze(-1).expand_as(seq))
            if keep_logps:
                seq_logps = seq_logps.gather(1, beam_ix[..., None, None].expand_as(seq_logps))
        seq = torch.cat([seq, word.unsqueeze(-1)], -1)
        sums = current.gather(1, beam_ix) + logp.view(n_img, -1).gather(1, ix)
        if keep_logps:
            chosen = logp.gather(1, beam_ix.unsqueeze(-1).expand(-1, -1, vocab))
            seq_logps = torch.cat([seq_logps, chosen.unsqueeze(2)], 2)
        state = {k: v[state_ix] for k, v in state.items()}
        for b in range(n_img):
            is_end = seq[b, :, t] == END_ID
            if t == max_len:
                is_end.fill_(True)
            for v in range(beam):
                if is_end[v]:
                    done[b].append((sums[b, v].item(), seq[b, v].clone()))
            sums[b, is_end] -= 1000
        if t == max_len:
            break
        logp, state = model.step(seq[:, :, t].reshape(-1), state, static)
    return [sorted(found, key=lambda x: -x[0])[0][1].tolist() for found in done]


def caption_flops(beam: int, steps: float, hidden: int, vocab: int, grid: int, dim: int) -> float:
    """Matrix-product FLOPs of one image's caption (AdaptiveAttention, embed = attention = hidden): the image
    projections once, then one hypothesis at the first step and `beam` at each later one (the least any beam
    search of this width computes): LSTM cell (input word + global image), sentinel, attention, output layer."""
    image = 2 * grid * dim * hidden + 2 * grid * hidden * hidden + 2 * dim * hidden
    step = (2 * 4 * hidden * (3 * hidden) + 2 * 2 * hidden * hidden + 2 * hidden * hidden
            + 2 * 2 * hidden * hidden + 2 * grid * hidden + 2 * (grid + 1) * hidden + 2 * hidden * vocab)
    return image + step * (1 + beam * (steps - 1))


def output_layer_gflops(rows: int, hidden: int, vocab: int, repeats: int = 10) -> float:
    """This machine's fp32 rate (CPU clock) on the output layer's product [rows, hidden] x [hidden, vocab]."""
    a, b = torch.randn(rows, hidden), torch.randn(hidden, vocab)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        best = min(best, time.process_time() - start)
    return 2 * rows * hidden * vocab / best / 1e9


def peer_comparison(args: argparse.Namespace, model: AdaptiveAttention, regions: torch.Tensor) -> dict:
    """vltools' caption_batches against `self_critical_beam` on the same features file and blocks, per beam size."""
    words = [*SPECIALS, *(f"w{i}" for i in range(args.vocab - len(SPECIALS)))]
    vocab = Vocabulary(words)
    ids = [f"i{n}" for n in range(regions.size(0))]
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "feats.h5"
        with FeaturesWriter(path, {"backbone": "random"}, dtype="float32") as writer:
            writer.add(ids, regions=regions.numpy())
        with FeaturesReader(path) as reader, torch.inference_mode():
            def peer(beam: int, keep_logps: bool) -> list[str]:
                out = []
                for start in range(0, len(ids), args.batch_size):
                    chunk = ids[start:start + args.batch_size]
                    images = image_tensors(reader.read(chunk, ["regions"]))
                    tokens = self_critical_beam(model, images, beam, args.max_len, keep_logps)
                    out += decode(vocab, torch.tensor([t + [0] * (args.max_len + 1 - len(t)) for t in tokens]))
                return out

            def ours(beam: int) -> list[str]:
                return [c for _, caps, _ in caption_batches(model, vocab, reader, ids, beam_size=beam,
                                                            max_len=args.max_len, batch_size=args.batch_size)
                        for c in caps]

            for beam in args.peer_beams:
                runs = {"vltools": (ours, beam), "peer": (peer, beam, True), "peer_without_logps": (peer, beam, False)}
                captions, cpu, wall = {}, {}, {}
                for name, (run, *run_args) in [*runs.items(), *runs.items()]:   # twice each, interleaved: best time
                    start_cpu, start_wall = time.process_time(), time.perf_counter()
                    captions[name] = run(*run_args)
                    cpu[name] = min(cpu.get(name, float("inf")), time.process_time() - start_cpu)
                    wall[name] = min(wall.get(name, float("inf")), time.perf_counter() - start_wall)
                n_img = len(ids)
                lengths = np.mean([len(c.split()) for c in captions["vltools"]])
                # the floor at the captions' mean length (words + <end>), at the output layer's rate
                flops = caption_flops(beam, float(lengths) + 1, args.hidden, args.vocab, args.grid, args.dim)
                rate = output_layer_gflops(min(args.batch_size, n_img) * beam, args.hidden, args.vocab)
                floor = flops / (rate * 1e9)
                row = {"cpu_ms_per_image": {k: 1e3 * v / n_img for k, v in cpu.items()},
                       "wall_ms_per_image": {k: 1e3 * v / n_img for k, v in wall.items()},
                       "identical_with_peer": sum(a == b for a, b in zip(captions["vltools"], captions["peer"],
                                                                         strict=True)),
                       "identical_peer_variants": sum(a == b for a, b in zip(captions["peer"],
                                                                             captions["peer_without_logps"],
                                                                             strict=True)),
                       "mean_words": float(lengths), "mflops_per_image": flops / 1e6,
                       "output_layer_gflops": rate, "floor_ms_per_image": 1e3 * floor,
                       "vltools_ratio_to_floor": cpu["vltools"] / n_img / floor}
                result[f"beam{beam}"] = row
                per = row["cpu_ms_per_image"]
                print(f"beam {beam}, {n_img} images (blocks of {args.batch_size}, mean {lengths:.1f} words): CPU ms "
                      f"per image vltools {per['vltools']:.1f}, self-critical structure {per['peer']:.1f} "
                      f"({per['peer'] / per['vltools']:.2f}x vltools'; without the per-step log-prob table "
                      f"{per['peer_without_logps']:.1f}, {per['peer_without_logps'] / per['vltools']:.2f}x); identical "
                      f"captions {row['identical_with_peer']}/{n_img}; floor {row['floor_ms_per_image']:.1f} ms "
                      f"({flops / 1e6:.0f} MFLOP at {rate:.1f} GFLOP/s, the output layer's product at "
                      f"{min(args.batch_size, n_img) * beam} rows): vltools {row['vltools_ratio_to_floor']:.2f}x the "
                      "floor", flush=True)
            if args.peer_profile:
                result["profile"] = profile_beam(model, reader, ids[:args.batch_size], args)
    return result


def profile_beam(model: AdaptiveAttention, reader: FeaturesReader, ids: list[str], args: argparse.Namespace) -> dict:
    """torch.profiler's top ops (self CPU time) of one block at the first beam size: vltools' beam search and the
    self-critical structure (with its per-step log-prob table)."""
    from torch.profiler import ProfilerActivity, profile

    images = image_tensors(reader.read(ids, ["regions"]))
    beam = args.peer_beams[0]
    runs = {"vltools": lambda: beam_search(model.step, *model.init_state(images), beam_size=beam, max_len=args.max_len),
            "self-critical structure": lambda: self_critical_beam(model, images, beam, args.max_len)}
    result = {}
    for name, run in runs.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events)
        top = [(e.key, round(e.self_cpu_time_total / 1e3, 1), round(100 * e.self_cpu_time_total / total, 1))
               for e in events[:12]]
        result[name] = {"total_ms": round(total / 1e3, 1), "top_ms_percent": top}
        print(f"profile of {name}, {len(ids)} images, beam {beam}: {total / 1e3:.0f} ms; "
              + ", ".join(f"{k} {ms:.0f} ms ({pc}%)" for k, ms, pc in top), flush=True)
    return result


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
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--peer", action="store_true", help="only: caption_batches against the self-critical "
                        "structure (see the module docstring)")
    parser.add_argument("--peer-beams", type=lambda text: [int(b) for b in text.split(",")], default=[3, 5])
    parser.add_argument("--peer-profile", action="store_true", help="with --peer: profile one block of vltools' search")
    parser.add_argument("--end-bias", type=float, default=0.0, help="added to <end>'s output bias, so that captions "
                        "end before --max-len (a random model never ends early) and finished hypotheses matter")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = AdaptiveAttention(args.vocab, img_dim=args.dim, embed_size=args.hidden, hidden_size=args.hidden,
                              attention_size=args.hidden, dropout=0.5).eval()
    if args.end_bias:
        with torch.no_grad():
            model.decoder.output.bias[END_ID] += args.end_bias
    regions = torch.randn(args.images, args.grid, args.dim, generator=torch.Generator().manual_seed(1)).relu()
    images = {"regions": regions}
    print(f"CPU: {cpu_model()}, torch threads: {torch.get_num_threads()}, "
          f"AdaptiveAttention hidden {args.hidden}, vocab {args.vocab}, {args.grid} x {args.dim} features")
    if args.peer:
        result = {"images": args.images, "threads": torch.get_num_threads(), "cpu": cpu_model(),
                  "end_bias": args.end_bias, **peer_comparison(args, model, regions)}
        print(json.dumps(result))
        return
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
