"""Benchmark of L2C's pipeline: segment-pool throughput, one training step, and `caption --pairs` speed.

  - segment-pool: the whole stage (decoding in DataLoader workers, backbone + FCN forward, HDF5 writing) in
    images/s against the backbone + FCN forward passes alone on batches decoded beforehand (target >= 0.8);
    crops of the real photographs in tests/data/photos, random weights (no download);
  - training step: forward + backward + Adam on 16 pairs + 128 single images (the paper's batches), random
    feature maps, against the same step on the 16 pairs alone (the auxiliary task's cost);
  - describing pairs: pairs/s of the batched beam search (beam 3) against greedy decoding in the same run.
Prints readable lines (with the CPU model and torch's thread count), then one JSON object on the last line.

    python benchmarks/l2c.py [--images 16] [--image-size 224] [--feature-dim 2048 --map-size 14] [--device auto]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract import make_images  # noqa: E402  (the benchmarks' shared photo crops)
from machine import cpu_model  # noqa: E402

from vltools.data.l2c import FeatureMaps, PairSplit  # noqa: E402
from vltools.devices import resolve_device  # noqa: E402
from vltools.infer.extract import SegmentExtractor, extract  # noqa: E402
from vltools.infer.pairs import describe_pairs  # noqa: E402
from vltools.infer.settings import RunOptions  # noqa: E402
from vltools.io.features import FeaturesWriter  # noqa: E402
from vltools.io.progress import configure  # noqa: E402
from vltools.losses import sequence_cross_entropy  # noqa: E402
from vltools.models.l2c import L2C  # noqa: E402
from vltools.text.vocab import Vocabulary  # noqa: E402
from vltools.vision.backbones import normalize  # noqa: E402
from vltools.vision.images import list_inputs  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def segment_pool(args: argparse.Namespace, tmp: Path) -> dict:
    folder = tmp / "images"
    folder.mkdir()
    make_images(folder, args.images)
    items = list_inputs([folder])
    # float32: a random-init ResNet-101 (no download here) has activations beyond float16's range
    run = RunOptions(batch_size=args.batch_size, workers=args.workers, device=args.device, dtype="float32")
    extractor = SegmentExtractor(run, backbone=args.backbone, weights="none", image_size=args.image_size,
                                 seg_weights="none")
    extract(extractor, items, items[:args.batch_size], str(tmp / "warmup.h5"))
    start = time.perf_counter()
    counts = extract(extractor, items, items, str(tmp / "feats.h5"))
    stage = counts["written"] / (time.perf_counter() - start)
    dataset = extractor.dataset(items)
    images = torch.stack([dataset[i]["image"] for i in range(len(items))])
    with torch.inference_mode():
        start = time.perf_counter()
        for batch in images.split(args.batch_size):
            inputs = normalize(batch.to(extractor.device)).contiguous(memory_format=torch.channels_last)
            featmaps = extractor.backbone(inputs)
            extractor.fcn(inputs, tuple(featmaps.shape[-2:]))
        sync(extractor.device)
        alone = len(items) / (time.perf_counter() - start)
    return {"stage_images_per_s": round(stage, 3), "forward_images_per_s": round(alone, 3),
            "ratio": round(stage / alone, 3)}


def random_batch(args: argparse.Namespace, count: int, length: int, vocab: int, device: torch.device) -> list:
    featmap = torch.randn(count, args.feature_dim, args.map_size, args.map_size, device=device)
    mask = torch.rand(count, args.map_size, args.map_size, device=device)
    tokens = torch.randint(4, vocab, (count, length), device=device)
    tokens[:, 0], tokens[:, -1] = 1, 2
    return [featmap, mask, tokens]


def training_step(args: argparse.Namespace, device: torch.device) -> dict:
    vocab = 2000
    model = L2C(vocab, feature_dim=args.feature_dim).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    fa, ma, tokens = random_batch(args, 16, 32, vocab, device)
    fb, mb, _ = random_batch(args, 16, 32, vocab, device)
    fs, ms, single = random_batch(args, 128, 18, vocab, device)

    def step(with_single: bool) -> float:
        start = time.perf_counter()
        optimizer.zero_grad()
        out = model(fa, ma, fb, mb, tokens, *((fs, ms, single) if with_single else (None, None, None)))
        loss = sequence_cross_entropy(out.pair_logp, tokens[:, 1:]) + out.tv.mean()
        if with_single:
            padded = torch.nn.functional.pad(single[:, 1:], (0, out.single_logp.shape[1] - single.shape[1] + 1))
            loss = loss + sequence_cross_entropy(out.single_logp, padded)
        loss.backward()
        optimizer.step()
        sync(device)
        return time.perf_counter() - start

    step(True)
    both = min(step(True) for _ in range(args.repeats))
    pairs = min(step(False) for _ in range(args.repeats))
    return {"step_s": round(both, 4), "pairs_only_step_s": round(pairs, 4), "ratio": round(both / pairs, 3)}


def describing(args: argparse.Namespace, device: torch.device, tmp: Path) -> dict:
    vocab = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", *(f"w{i}" for i in range(2000))])
    ids = [f"i{n}" for n in range(2 * args.pairs)]
    featmaps, masks, _ = random_batch(args, len(ids), 2, len(vocab), torch.device("cpu"))
    with FeaturesWriter(tmp / "maps.h5", {"stage": "segment-pool"}, dtype="float32") as writer:
        writer.add(ids, featmap=featmaps.numpy(), mask=masks.numpy())
    pairs = PairSplit("bench", [f"p{n}" for n in range(args.pairs)], ids[0::2], ids[1::2], [[] for _ in ids[0::2]])
    model = L2C(len(vocab), feature_dim=args.feature_dim).to(device).eval()
    maps = FeatureMaps(tmp / "maps.h5")
    rates = {}
    for beam in (3, 1):
        describe_pairs(model, maps, pairs, vocab, beam_size=beam, max_len=args.max_len, batch_size=64, device=device)
        start = time.perf_counter()
        describe_pairs(model, maps, pairs, vocab, beam_size=beam, max_len=args.max_len, batch_size=64, device=device)
        rates[beam] = args.pairs / (time.perf_counter() - start)
    return {"beam3_pairs_per_s": round(rates[3], 2), "greedy_pairs_per_s": round(rates[1], 2),
            "ratio": round(rates[3] / rates[1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--backbone", default="resnet101")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--feature-dim", type=int, default=2048, help="D of the feature maps (ResNet-101: 2048)")
    parser.add_argument("--map-size", type=int, default=14, help="h = w of the feature maps (448 px / 32)")
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=64, help="words per description (no <end> from a random model)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    configure(quiet=True)
    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="vltools-bench-") as tmp:
        pool = segment_pool(args, Path(tmp))
        train = training_step(args, device)
        describe = describing(args, device, Path(tmp))
    result = {"benchmark": "l2c", "device": str(device), "cpu": cpu_model(), "torch_threads": torch.get_num_threads(),
              "backbone": args.backbone, "image_size": args.image_size, "feature_dim": args.feature_dim,
              "map_size": args.map_size, "segment_pool": pool, "training_step": train, "describe": describe}
    print(f"device {device}, CPU {result['cpu']}, torch threads {result['torch_threads']}")
    print(f"segment-pool ({args.backbone} + FCN ResNet-101, {args.image_size} px): stage {pool['stage_images_per_s']} "
          f"images/s, forward alone {pool['forward_images_per_s']} images/s, ratio {pool['ratio']} (target >= 0.8)")
    print(f"training step, 16 pairs + 128 single images (D={args.feature_dim}, {args.map_size}x{args.map_size}): "
          f"{train['step_s']} s; 16 pairs alone {train['pairs_only_step_s']} s; ratio {train['ratio']}")
    print(f"caption --pairs: beam 3 {describe['beam3_pairs_per_s']} pairs/s, greedy {describe['greedy_pairs_per_s']} "
          f"pairs/s, ratio {describe['ratio']} ({args.max_len} words)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
