"""Speed and agreement of vltools' batched SGR similarity against the released code's per-caption loop.

Same SGR weights (random init; embed 1024, sim 256, K=36 regions of 2048-d features) and the same inputs
for both: the 250 real Flickr30K test captions in tests/data (repeated to fill the size), encoded with
the SGRAF Flickr30K vocabulary, and random region features.  The reference follows the structure of the
released evaluation: `shard_attn_scores` (100 x 100 shards) calling a similarity module that loops over
captions, slices each caption to its real words and repeats it over the image shard (`released_forward_sim`,
which computes SAF too, for flickr_1k.py and train_sgraf.py --model saf).  Both sides include encoding the
images and captions.  The larger size runs the released loop on its first 200 captions and scales the time by
word count (`--full-reference` runs it all).  Also reported, at the first
size: bf16 autocast on CPU (ratio, largest difference, how R@K and the top-1 caption move; with random
weights all scores lie within a few thousandths of each other, so R@K is near chance and the ranking is
far more fragile than a trained model's), and one training step on a batch of 128 (forward, loss,
backward, gradient clipping, Adam).

Limits (`--limits`, or `--limits-only` to skip the comparison above): the floating-point operations of SGR
and SAF per image-caption pair at the official sizes, counted analytically (`flops_per_pair`: the matrix
products of the batched computation, per pair, for the mean caption length; per-image and per-caption
encodings are amortised and left out), this machine's fp32 matrix-multiply rate measured in the same run
on the shape of the dominant product, and vltools' measured time per pair against the floor FLOPs / rate:
the block kernel alone (`model.similarity` on encoded inputs, what the FLOPs count) and `similarity_blocks`
with encoding, each beside the general path (`sgraf.BLOCK_KERNEL = False`, the kernel before) in the same run;
`--profile` adds torch.profiler's top ops of one 16 x 64 block on both paths.  The CPU's model and whether it
has native bf16 (avx512_bf16 / amx_bf16 flags) are printed; bf16 autocast is timed only where it does.
Two-stage search (`match --rerank K`): the pieces its loop runs, measured (scoring a query against its K
encoded candidates, per pair; encoding one image or caption, done once as a query and once as a kept
candidate), plus the first stage (VSE encoders and the exact search), extrapolated to a 5,000 x 25,000 set
against exhaustive matching at the measured time per pair (exhaustive 5K x 25K SGR takes days on a CPU).

Run: `.venv/bin/python benchmarks/match_sgraf.py [--limits | --limits-only]` (2 threads; the last line is one
JSON object).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vltools.data.converters.scan_vocab import load_vocabulary
from vltools.devices import autocast
from vltools.eval.retrieval import retrieval_metrics
from vltools.infer.settings import MATCH_BLOCK
from vltools.infer.similarity import ensemble_similarity, similarity_blocks
from vltools.io.checkpoints import save_checkpoint
from vltools.losses import hardest_negative_loss
from vltools.models import build_model, default_config, schema_version, sgraf
from vltools.models.sgraf import l1norm, l2norm

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ROOT / "tests/data/convert/precomp/f30k_precomp/test_caps.txt"
VOCAB = ROOT / "tests/data/convert/scan_vocab/f30k_precomp_vocab.json"
SIZES = ((100, 500), (200, 1000))
SHARD = 100
LARGE_REFERENCE_CAPTIONS = 200
IMAGE_BLOCK, CAPTION_BLOCK = MATCH_BLOCK


# ---------- the released evaluation's structure, on the same modules ----------

def scan_attention(query: torch.Tensor, context: torch.Tensor, smooth: float) -> torch.Tensor:
    """Per-caption SCAN attention as released: query [n_img, n_word, E], context [n_img, K, E]."""
    attn = torch.bmm(context, query.transpose(1, 2))
    attn = l2norm(nn.functional.leaky_relu(attn, 0.1), 2)
    attn = torch.softmax(attn.transpose(1, 2) * smooth, dim=2)
    return l2norm(torch.bmm(attn, context), -1)


def released_forward_sim(sim: nn.Module, img_emb: torch.Tensor, cap_emb: torch.Tensor,
                         cap_lens: list[int]) -> torch.Tensor:
    """EncoderSimilarity.forward of the released code (SGR or SAF): a Python loop over captions."""
    n_image = img_emb.size(0)
    sa = sim.v_global_w
    img_glo = l2norm(((sa.embedding_common(sa.embedding_local(img_emb) * sa.embedding_global(img_emb.mean(1))
                                           .unsqueeze(1)).squeeze(2)).softmax(1).unsqueeze(2) * img_emb).sum(1))
    ta = sim.t_global_w
    columns = []
    for i in range(cap_emb.size(0)):
        cap_i = cap_emb[i, :cap_lens[i], :].unsqueeze(0)
        cap_i_expand = cap_i.repeat(n_image, 1, 1)
        weights = ta.embedding_common(ta.embedding_local(cap_i) * ta.embedding_global(cap_i.mean(1)).unsqueeze(1))
        cap_glo_i = l2norm((weights.squeeze(2).softmax(1).unsqueeze(2) * cap_i).sum(1))
        context = scan_attention(cap_i_expand, img_emb, smooth=9.0)
        sim_loc = l2norm(sim.sim_tranloc_w((context - cap_i_expand).pow(2)))
        sim_glo = l2norm(sim.sim_tranglo_w((img_glo - cap_glo_i).pow(2)))
        sim_emb = torch.cat([sim_glo.unsqueeze(1), sim_loc], 1)
        columns.append(torch.sigmoid(sim.sim_eval_w(released_aggregation(sim, sim_emb))))
    return torch.cat(columns, 1)


def released_aggregation(sim: nn.Module, sim_emb: torch.Tensor) -> torch.Tensor:
    """The similarity vector [n_img, S] of one caption's nodes [n_img, 1 + words, S], as released: SGR's graph
    steps (SGR_module) then the global node, or SAF's attention filtration (AttentionFiltration.forward: weights
    l1-normalised over the nodes, their weighted sum l2-normalised)."""
    if sim.module_name == "SGR":
        for step in sim.SGR_module:
            edges = torch.softmax(torch.bmm(step.graph_query_w(sim_emb), step.graph_key_w(sim_emb).permute(0, 2, 1)),
                                  dim=-1)
            sim_emb = torch.relu(step.sim_graph_w(torch.bmm(edges, sim_emb)))
        return sim_emb[:, 0, :]
    saf = sim.SAF_module
    attn = l1norm(torch.sigmoid(saf.bn(saf.attn_sim_w(sim_emb).permute(0, 2, 1))), dim=-1)
    return l2norm(torch.matmul(attn, sim_emb).squeeze(1), -1)


def released_shard_attn_scores(model: nn.Module, img_embs: torch.Tensor, cap_embs: torch.Tensor,
                               cap_lens: list[int]) -> torch.Tensor:
    sims = torch.zeros(len(img_embs), len(cap_embs))
    for im_start in range(0, len(img_embs), SHARD):
        for ca_start in range(0, len(cap_embs), SHARD):
            block = released_forward_sim(model.sim_enc, img_embs[im_start:im_start + SHARD],
                                         cap_embs[ca_start:ca_start + SHARD], cap_lens[ca_start:ca_start + SHARD])
            sims[im_start:im_start + SHARD, ca_start:ca_start + SHARD] = block
    return sims


def released_match(model: nn.Module, regions: torch.Tensor, tokens: torch.Tensor,
                   lengths: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Encode as released (batches of 128 captions), then shard_attn_scores; returns sims, similarity time."""
    with torch.inference_mode():
        img_embs = model.img_enc(regions)
        cap_embs = torch.cat([model.txt_enc(tokens[s:s + 128], lengths[s:s + 128]) for s in range(0, len(tokens), 128)])
        start = time.perf_counter()
        sims = released_shard_attn_scores(model, img_embs, cap_embs, lengths.tolist())
    return sims, time.perf_counter() - start


# ---------- inputs and measurements ----------

def real_captions(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    vocab = load_vocabulary(VOCAB)
    encoded = [vocab.encode(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    encoded = [encoded[i % len(encoded)] for i in range(n)]
    lengths = torch.tensor([len(e) for e in encoded])
    tokens = torch.zeros(n, int(lengths.max()), dtype=torch.long)
    for row, ids in enumerate(encoded):
        tokens[row, :len(ids)] = torch.tensor(ids)
    return tokens, lengths


def save_release_model(path: Path, name: str, seed: int = 0, settings: dict | None = None) -> Path:
    """A random-initialised `name` (sgr, saf, vse) at the released sizes (its defaults: 36 x 2048 regions, embed 1024,
    word 300; SGR/SAF sim 256, 3 SGR steps; or with the `settings` given changed) with the SGRAF Flickr30K
    vocabulary, saved as vltools saves a checkpoint (what `vltools match --model` reads)."""
    vocab = load_vocabulary(VOCAB)
    config = {**default_config(name), **(settings or {})}
    torch.manual_seed(seed)
    save_checkpoint(path, name, config, build_model(name, config, len(vocab)).state_dict(), vocab=vocab.words,
                    schema=schema_version(name))
    return path


def vltools_match(model: nn.Module | list[nn.Module], regions: torch.Tensor, tokens: torch.Tensor,
                  lengths: torch.Tensor, precision: str = "fp32", device: str = "cpu") -> torch.Tensor:
    """`similarity_blocks` in the blocks `match` uses by default (MATCH_BLOCK images x captions), on `device`; a
    list of models is their ensemble (the mean)."""
    images = [(regions[s:s + IMAGE_BLOCK], None) for s in range(0, len(regions), IMAGE_BLOCK)]
    captions = [(tokens[s:s + CAPTION_BLOCK, :int(lengths[s:s + CAPTION_BLOCK].max())], lengths[s:s + CAPTION_BLOCK])
                for s in range(0, len(tokens), CAPTION_BLOCK)]
    return similarity_blocks(model, images, captions, device=device, precision=precision)


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def recalls(sims: torch.Tensor) -> dict[str, float]:
    metrics = retrieval_metrics(sims.numpy(), np.arange(sims.size(1)) // 5)
    return {f"{way}_R@{k}": metrics[way][f"R@{k}"] for way in ("i2t", "t2i") for k in (1, 5, 10)}


def train_step_seconds(vocab_size: int, batch: int = 128, steps: int = 1) -> float:
    torch.manual_seed(1)
    model = build_model("sgr", {}, vocab_size).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    tokens, lengths = real_captions(batch)
    regions = torch.randn(batch, 36, 2048)
    times = []
    for size in [8] + [batch] * steps:   # a small first step creates Adam's state and warms up
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = hardest_negative_loss(model(regions[:size], None, tokens[:size], lengths[:size]))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def measure(model: nn.Module, n_img: int, n_cap: int, reference_captions: int, bf16: bool) -> dict[str, object]:
    """One size: the released loop on the first `reference_captions` captions (extrapolated to all by word
    count when fewer), vltools in fp32 (and bf16) on all of them."""
    regions = torch.randn(n_img, 36, 2048)
    tokens, lengths = real_captions(n_cap)
    sub = slice(0, reference_captions)
    (reference, ref_sim_time), ref_time = timed(released_match, model, regions, tokens[sub], lengths[sub])
    scale = float(lengths.sum() / lengths[sub].sum())
    ours, ours_time = timed(vltools_match, model, regions, tokens, lengths)
    ref_total = ref_time * scale
    row: dict[str, object] = {
        "released_loop_s": round(ref_total, 2),
        "released_loop_measured_on_captions": reference_captions,
        "released_loop_extrapolated": reference_captions < n_cap,
        "released_loop_similarity_only_s": round(ref_sim_time * scale, 2),
        "vltools_fp32_s": round(ours_time, 2),
        "speedup_fp32": round(ref_total / ours_time, 2),
        "max_abs_diff_fp32": float((ours[:, sub] - reference).abs().max()),
        "score_std_fp32": float(ours.std()),
    }
    if bf16:
        ours_bf16, bf16_time = timed(vltools_match, model, regions, tokens, lengths, precision="bf16")
        fp32_recalls, bf16_recalls = recalls(ours), recalls(ours_bf16)
        row.update({
            "vltools_bf16_s": round(bf16_time, 2),
            "speedup_bf16": round(ref_total / bf16_time, 2),
            "max_abs_diff_bf16": float((ours_bf16[:, sub] - reference).abs().max()),
            "recall_fp32": fp32_recalls,
            "recall_change_bf16": {k: round(bf16_recalls[k] - v, 2) for k, v in fp32_recalls.items()},
            "top1_caption_agreement_bf16": float((ours_bf16.argmax(1) == ours.argmax(1)).float().mean()),
        })
    return row


# ---------- the machine's limit: FLOPs per pair, matmul rate, two-stage search ----------

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]   # --clock cpu: this process's CPU seconds, for a shared machine at --threads 1

def flops_per_pair(model_name: str, words: float, regions: int = 36, embed: int = 1024, sim: int = 256,
                   steps: int = 3) -> dict[str, float]:
    """Matrix-product FLOPs (2 per multiply-add) of one image-caption pair as vltools computes it.

    `words` counts the caption's tokens with <start> and <end>; the graph has words + 1 nodes.
    """
    nodes = words + 1
    parts = {
        "attention_logits": 2 * regions * words * embed,       # v_k . t_w
        "attended_image": 2 * words * regions * embed,         # u_w = sum_k alpha_kw v_k
        "local_map": 2 * words * embed * sim,                  # W_l (c_w - t_w)^2
        "global_map": 2 * embed * sim,                         # W_g (v_glo - t_glo)^2
        "score": 2 * sim,
    }
    if model_name == "sgr":
        # steps - 1 full steps: query map N M + u (one S x S product per node), logits, edges x nodes, W_r
        parts["graph_steps"] = (steps - 1) * (2 * nodes * sim * sim + 2 * nodes * nodes * sim
                                              + 2 * nodes * nodes * sim + 2 * nodes * sim * sim)
        parts["graph_last_step"] = 2 * sim * sim + 2 * nodes * sim + 2 * nodes * sim + 2 * sim * sim
    else:
        parts["filtration"] = 2 * nodes * sim + 2 * nodes * sim   # attention logits, weighted sum
    parts["total"] = sum(parts.values())
    return parts


def matmul_gflops(rows: int = 8192, inner: int = 1024, cols: int = 256, repeats: int = 10) -> float:
    """This machine's fp32 matrix-multiply rate on the dominant product's shape ([P, 1024] x [1024, 256])."""
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        a @ b
        best = min(best, clock() - start)
    return 2 * rows * inner * cols / best / 1e9


def rerank_costs(model: nn.Module, k: int, queries: int = 4) -> dict[str, float]:
    """What `match --rerank K` spends, measured on the pieces its loop runs (`rerank_direction`):

    scoring one query against its K encoded candidates (one image x K captions for i2t, K images x one
    caption for t2i, global vectors given, as the loop calls `ensemble_similarity`), per pair; and encoding
    one image or one caption with the model (encoder + global vector), which the loop does once per query
    and once per candidate (candidates are kept between query blocks).
    """
    tokens, lengths = real_captions(k)
    regions = torch.randn(max(k, queries), 36, 2048)
    models = [model]
    with torch.inference_mode():
        start = clock()
        img = model.encode_images(regions, None)
        img_glo = model.global_images(img)
        per_image = (clock() - start) / len(regions)
        start = clock()
        cap = model.encode_captions(tokens, lengths)
        cap_glo = model.global_captions(cap, lengths)
        per_caption = (clock() - start) / k
        start = clock()
        for q in range(queries):
            ensemble_similarity(models, [img[q:q + 1]], [cap], lengths, [(img_glo[q:q + 1], cap_glo)])
        i2t = (clock() - start) / (queries * k)
        start = clock()
        for q in range(queries):
            ensemble_similarity(models, [img[:k]], [cap[q:q + 1]], lengths[q:q + 1], [(img_glo[:k], cap_glo[q:q + 1])])
        t2i = (clock() - start) / (queries * k)
    return {"i2t": i2t, "t2i": t2i, "encode_image": per_image, "encode_caption": per_caption}


def first_stage_seconds(n_images: int, n_captions: int, vocab_size: int, sample: int = 200) -> float:
    """VSE encoding of every image and caption (measured on `sample` of each, scaled) plus the exact search."""
    vse = build_model("vse", {}, vocab_size).eval()
    tokens, lengths = real_captions(sample)
    regions = torch.randn(sample, 36, 2048)
    with torch.inference_mode():
        start = clock()
        vse.encode_images(regions, None)
        per_image = (clock() - start) / sample
        start = clock()
        vse.encode_captions(tokens, lengths)
        per_caption = (clock() - start) / sample
    dim = 1024
    search = 2 * 2 * n_images * n_captions * dim / (matmul_gflops() * 1e9)   # both directions
    return per_image * n_images + per_caption * n_captions + search


def limits(model: nn.Module, vocab_size: int, seconds_per_pair: dict[str, float]) -> dict[str, object]:
    """FLOPs per pair, the matmul rate, time per pair against the floor, and the two-stage extrapolation."""
    _, lengths = real_captions(250)
    words = float(lengths.float().mean())
    rate = matmul_gflops()
    report: dict[str, object] = {"mean_caption_tokens": round(words, 2), "matmul_fp32_gflops": round(rate, 1)}
    for name in ("sgr", "saf"):
        flops = flops_per_pair(name, words)
        floor = flops["total"] / (rate * 1e9)
        measured, kernel = seconds_per_pair[name], seconds_per_pair.get(f"{name}_kernel")
        report[name] = {"mflops_per_pair": round(flops["total"] / 1e6, 2),
                        "mflops_by_part": {k: round(v / 1e6, 3) for k, v in flops.items() if k != "total"},
                        "seconds_per_pair": measured, "floor_seconds_per_pair": floor,
                        "ratio_to_floor": round(measured / floor, 2)}
        if kernel is not None:
            report[name].update(kernel_seconds_per_pair=kernel, kernel_ratio_to_floor=round(kernel / floor, 2))
    n_images, n_captions = 5000, 25000
    exhaustive = n_images * n_captions * seconds_per_pair["sgr"]
    first = first_stage_seconds(n_images, n_captions, vocab_size)
    rows = {}
    for k in (50, 100, 200):
        cost = rerank_costs(model, k)
        # every image and every caption is encoded twice: once as a query, once as a (kept) candidate
        encode = 2 * (n_images * cost["encode_image"] + n_captions * cost["encode_caption"])
        second = encode + n_images * k * cost["i2t"] + n_captions * k * cost["t2i"]
        rows[k] = {"rerank_i2t_s_per_pair": cost["i2t"], "rerank_t2i_s_per_pair": cost["t2i"],
                   "encode_s_per_image": cost["encode_image"], "encode_s_per_caption": cost["encode_caption"],
                   "estimated_encoding_s": round(encode), "estimated_rerank_s": round(first + second),
                   "speedup_vs_exhaustive": round(exhaustive / (first + second), 1)}
    report["5Kx25K"] = {"estimated_exhaustive_s": round(exhaustive), "estimated_first_stage_s": round(first),
                        "rerank": rows}
    return report


def seconds_per_pair_now(vocab_size: int, n_img: int = 50, n_cap: int = 250, general: bool = False,
                         precision: str = "fp32") -> dict[str, float]:
    """vltools' time per pair for SGR and SAF (random official-size weights, real captions): `sgr` / `saf`,
    `similarity_blocks` end to end on n_img x n_cap, encoding included (as this benchmark has always measured it,
    at 50 x 250: the caption GRU and self-attention are then amortised over 50 images only); `sgr_kernel` /
    `saf_kernel`,
    the similarity of the same block from its embeddings and global vectors (what the FLOP count covers).
    `general`: with the block kernel off (`sgraf.BLOCK_KERNEL`), the general path every inference took before."""
    regions = torch.randn(n_img, 36, 2048, generator=torch.Generator().manual_seed(5))
    tokens, lengths = real_captions(n_cap)
    result = {}
    kernel, sgraf.BLOCK_KERNEL = sgraf.BLOCK_KERNEL, not general
    try:
        for name in ("sgr", "saf"):
            torch.manual_seed(0)
            model = build_model(name, {}, vocab_size).eval()
            vltools_match(model, regions[:8], tokens[:40], lengths[:40], precision)    # warm-up
            start = clock()
            vltools_match(model, regions, tokens, lengths, precision)
            result[name] = (clock() - start) / (n_img * n_cap)
            with torch.inference_mode(), autocast(torch.device("cpu"), precision):
                img, cap = model.encode_images(regions), model.encode_captions(tokens, lengths)
                globals_ = model.global_images(img), model.global_captions(cap, lengths)
                best = float("inf")
                for _ in range(2):   # the better of two: other jobs' load only ever adds time
                    start = clock()
                    model.similarity(img, cap, lengths, *globals_)
                    best = min(best, clock() - start)
                result[f"{name}_kernel"] = best / (n_img * n_cap)
    finally:
        sgraf.BLOCK_KERNEL = kernel
    return result


def cpu_description() -> dict[str, object]:
    """The CPU's model name and whether it computes bf16 natively (AVX512-BF16 or AMX flags in /proc/cpuinfo)."""
    info = {"model": platform.processor() or platform.machine(), "bf16_flags": [], "native_bf16": False}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["model"] = value.strip()
        elif key.strip() == "flags":
            info["bf16_flags"] = sorted(set(value.split()) & {"avx512_bf16", "amx_bf16", "amx_tile"})
            break
    info["native_bf16"] = bool(set(info["bf16_flags"]) & {"avx512_bf16", "amx_bf16"})
    return info


def profile_block(vocab_size: int, n_img: int = 16, n_cap: int = 64, rows: int = 8) -> dict[str, list]:
    """torch.profiler's top ops (self CPU time) of one official-size block, general path and block kernel."""
    from torch.profiler import ProfilerActivity, profile

    regions = torch.randn(n_img, 36, 2048, generator=torch.Generator().manual_seed(6))
    tokens, lengths = real_captions(n_cap)
    result = {}
    for name in ("sgr", "saf"):
        torch.manual_seed(0)
        model = build_model(name, {}, vocab_size).eval()
        with torch.inference_mode():
            img, cap = model.encode_images(regions), model.encode_captions(tokens, lengths)
            globals_ = model.global_images(img), model.global_captions(cap, lengths)
            for label, kernel in (("general", False), ("block", True)):
                sgraf.BLOCK_KERNEL = kernel
                model.similarity(img, cap, lengths, *globals_)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    model.similarity(img, cap, lengths, *globals_)
                events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
                total = sum(e.self_cpu_time_total for e in events)
                top = [(e.key, round(e.self_cpu_time_total / 1e3, 1), round(100 * e.self_cpu_time_total / total, 1))
                       for e in events[:rows]]
                result[f"{name}_{label}"] = {"total_ms": round(total / 1e3, 1), "top_ms_percent": top}
                print(f"profile {name} {label}, {n_img} x {n_cap} block: {total / 1e3:.0f} ms; "
                      + ", ".join(f"{k} {ms:.0f} ms ({pc}%)" for k, ms, pc in top), flush=True)
            sgraf.BLOCK_KERNEL = True
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full-reference", action="store_true",
                        help=f"run the released loop on all captions of the larger size too (default: the first "
                             f"{LARGE_REFERENCE_CAPTIONS}, extrapolated by word count)")
    parser.add_argument("--limits", action="store_true", help="also report FLOPs per pair against the measured "
                        "matmul rate and the two-stage search extrapolated to 5K x 25K")
    parser.add_argument("--limits-only", action="store_true", help="only the --limits part")
    parser.add_argument("--profile", action="store_true", help="with --limits: torch.profiler's top ops of one "
                        "16 x 64 block, general path and block kernel")
    parser.add_argument("--limits-size", default="50x250", help="IMAGESxCAPTIONS on which --limits times a pair "
                        "(encoding is amortised over the images: the larger, the closer to a full run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="how --limits times things: wall seconds, or this process's CPU seconds (a shared machine "
                             "at --threads 1)")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab_size = len(load_vocabulary(VOCAB))
    model = build_model("sgr", {}, vocab_size).eval()
    cpu = cpu_description()
    report: dict[str, object] = {"threads": torch.get_num_threads(), "torch": torch.__version__, "clock": args.clock,
                                 "cpu": cpu}
    print(f"CPU: {cpu['model']}; torch threads: {torch.get_num_threads()}; clock: {args.clock}; native bf16: "
          f"{'yes (' + ', '.join(cpu['bf16_flags']) + ')' if cpu['native_bf16'] else 'no (no avx512_bf16 / amx_bf16)'}",
          flush=True)
    if args.limits or args.limits_only:
        if args.profile:
            report["profile"] = profile_block(vocab_size)
        size = [int(n) for n in args.limits_size.split("x")]
        general = seconds_per_pair_now(vocab_size, *size, general=True)
        report["limits"] = limits(model, vocab_size, seconds_per_pair_now(vocab_size, *size))
        report["limits"]["size"] = args.limits_size
        floor_rate = report["limits"]["matmul_fp32_gflops"]
        for name in ("sgr", "saf"):
            row = report["limits"][name]
            floor = row["floor_seconds_per_pair"]
            for part, key in (("", name), ("kernel_", f"{name}_kernel")):
                row[f"general_{part}seconds_per_pair"] = general[key]
                row[f"general_{part}ratio_to_floor"] = round(general[key] / floor, 2)
                row[f"{part}speedup_over_general"] = round(general[key] / row[f"{part}seconds_per_pair"], 2)
            print(f"{name}: {row['mflops_per_pair']} MFLOP per pair, floor {floor * 1e3:.3f} ms at {floor_rate} "
                  f"GFLOP/s; block kernel {row['kernel_seconds_per_pair'] * 1e3:.3f} ms per pair = "
                  f"{row['kernel_ratio_to_floor']}x the floor (general path, before: "
                  f"{general[name + '_kernel'] * 1e3:.3f} ms = "
                  f"{row['general_kernel_ratio_to_floor']}x; {row['kernel_speedup_over_general']}x faster); with "
                  f"encoding ({args.limits_size} through similarity_blocks): {row['seconds_per_pair'] * 1e3:.3f} ms = "
                  f"{row['ratio_to_floor']}x (before: {general[name] * 1e3:.3f} ms = {row['general_ratio_to_floor']}x)",
                  flush=True)
        if cpu["native_bf16"]:
            bf16 = seconds_per_pair_now(vocab_size, precision="bf16")
            for name in ("sgr", "saf"):
                row = report["limits"][name]
                kernel = bf16[f"{name}_kernel"]
                row["bf16_seconds_per_pair"], row["bf16_kernel_seconds_per_pair"] = bf16[name], kernel
                print(f"{name} bf16 autocast (the general path: the block kernel is fp32 only): {kernel * 1e3:.3f} ms "
                      f"per pair, {row['kernel_seconds_per_pair'] / kernel:.2f}x the fp32 block kernel's speed "
                      f"({bf16[name] * 1e3:.3f} ms with encoding)", flush=True)
        else:
            print("bf16 not measured: this CPU has no native bf16 (its bf16 products are emulated)", flush=True)
        big = report["limits"]["5Kx25K"]
        for k, row in big["rerank"].items():
            print(f"5K x 25K, --rerank {k}: about {row['estimated_rerank_s']} s vs exhaustive about "
                  f"{big['estimated_exhaustive_s']} s ({row['speedup_vs_exhaustive']}x, extrapolated)", flush=True)
        if args.limits_only:
            print(json.dumps(report))
            return
    for n_img, n_cap in SIZES:
        reference_captions = n_cap if n_cap == SIZES[0][1] or args.full_reference else LARGE_REFERENCE_CAPTIONS
        row = measure(model, n_img, n_cap, reference_captions, bf16=n_cap == SIZES[0][1])
        report[f"{n_img}x{n_cap}"] = row
        line = (f"{n_img}x{n_cap}: released loop {row['released_loop_s']}s"
                f"{' (extrapolated)' if row['released_loop_extrapolated'] else ''}, vltools fp32 "
                f"{row['vltools_fp32_s']}s ({row['speedup_fp32']}x, max diff {row['max_abs_diff_fp32']:.2e})")
        if "vltools_bf16_s" in row:
            line += (f", bf16 {row['vltools_bf16_s']}s ({row['speedup_bf16']}x, "
                     f"max diff {row['max_abs_diff_bf16']:.2e})")
        print(line, flush=True)
    step = train_step_seconds(vocab_size)
    report["train_step_batch128_s"] = round(step, 2)
    print(f"training step, batch 128 (forward + loss + backward + clip + Adam): {step:.2f}s", flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
