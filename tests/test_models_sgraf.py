"""SGR / SAF blocks against direct formulas, and the batched similarity against a per-caption loop.

The reference below follows the structure of the released SGRAF evaluation (one caption at a time,
sliced to its real words, repeated over the image block) and is written from the paper's and the
released code's formulas with the model's parameters read out explicitly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cuda_autocast import cuda_float32_ops

from vltools.errors import VLToolsError
from vltools.models import build_model, default_config
from vltools.models import sgraf as sgraf_module

EPS = 1e-8
SIZES = {"img_dim": 12, "embed_size": 32, "word_dim": 8, "sim_dim": 16, "num_regions": 5}
VOCAB = 40


def l2(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x / (x.pow(2).sum(dim, keepdim=True).sqrt() + EPS)


def linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return x @ layer.weight.t() + layer.bias


def bn_eval(bn: torch.nn.BatchNorm1d, x: torch.Tensor, channel_dim: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[channel_dim] = -1
    mean, var = bn.running_mean.view(shape), bn.running_var.view(shape)
    return (x - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(shape) + bn.bias.view(shape)


def make_model(name: str, seed: int = 0, **extra) -> torch.nn.Module:
    """A small model in eval mode with non-trivial BatchNorm statistics."""
    torch.manual_seed(seed)
    model = build_model(name, {**SIZES, **extra}, VOCAB)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.3, 0.3)
    return model.eval()


def make_inputs(seed: int = 1, n_img: int = 4, lengths: tuple = (5, 9, 3, 7, 9, 4)):
    gen = torch.Generator().manual_seed(seed)
    regions = torch.randn(n_img, SIZES["num_regions"], SIZES["img_dim"], generator=gen)
    lengths = torch.tensor(lengths)
    tokens = torch.randint(4, VOCAB, (len(lengths), int(lengths.max())), generator=gen)
    tokens = tokens * (torch.arange(tokens.size(1)) < lengths[:, None])
    return regions, tokens, lengths


# ---------- reference: the released code's per-caption structure ----------

def ref_visual_sa(sa, local: torch.Tensor, n_real: list[int]) -> torch.Tensor:
    """VisualSA per image over its first n_real regions (eval-mode BatchNorm: region position p has its own)."""
    lin_l, bn_l = sa.embedding_local[0], sa.embedding_local[1]
    lin_g, bn_g = sa.embedding_global[0], sa.embedding_global[1]
    out = []
    for i, n in enumerate(n_real):
        v = local[i, :n]
        scale = bn_l.weight[:n, None] / torch.sqrt(bn_l.running_var[:n, None] + bn_l.eps)
        l_emb = torch.tanh((linear(lin_l, v) - bn_l.running_mean[:n, None]) * scale + bn_l.bias[:n, None])
        g_emb = torch.tanh(bn_eval(bn_g, linear(lin_g, v.mean(0)), 0))
        w = torch.softmax(linear(sa.embedding_common[0], l_emb * g_emb).squeeze(-1), dim=0)
        out.append(l2((w[:, None] * v).sum(0)))
    return torch.stack(out)


def ref_text_sa(sa, words: torch.Tensor) -> torch.Tensor:
    """TextSA of one caption's real words [n, E]."""
    l_emb = torch.tanh(linear(sa.embedding_local[0], words))
    g_emb = torch.tanh(linear(sa.embedding_global[0], words.mean(0)))
    w = torch.softmax(linear(sa.embedding_common[0], l_emb * g_emb).squeeze(-1), dim=0)
    return l2((w[:, None] * words).sum(0))


def ref_attention(img: torch.Tensor, words: torch.Tensor, lam: float = 9.0) -> torch.Tensor:
    """SCAN text-to-image attention of one image's real regions [K, E] for one caption's words [n, E]."""
    a = F.leaky_relu(img @ words.t(), 0.1)          # [K, n]
    a = l2(a, dim=1)                                 # over words, per region
    alpha = torch.softmax(lam * a, dim=0)            # over regions, per word
    return l2(alpha.t() @ img)                       # [n, E]


def ref_sgr_step(step, nodes: torch.Tensor) -> torch.Tensor:
    q, k = linear(step.graph_query_w, nodes), linear(step.graph_key_w, nodes)
    edges = torch.softmax(q @ k.t(), dim=-1)
    return torch.relu(linear(step.sim_graph_w, edges @ nodes))


def ref_saf(saf, nodes: torch.Tensor) -> torch.Tensor:
    a = bn_eval(saf.bn, linear(saf.attn_sim_w, nodes).t(), 0)[0]   # [n]
    beta = torch.sigmoid(a)
    beta = beta / (beta.abs().sum() + EPS)
    return l2((beta[:, None] * nodes).sum(0))


def ref_nodes(sim, img: torch.Tensor, img_glo: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """[1 + n, S] nodes of one image (real regions) and one caption (real words)."""
    cap_glo = ref_text_sa(sim.t_global_w, words)
    local = l2(linear(sim.sim_tranloc_w, (ref_attention(img, words, sim.lambda_softmax) - words) ** 2))
    glob = l2(linear(sim.sim_tranglo_w, (img_glo - cap_glo) ** 2))
    return torch.cat([glob[None], local])


def ref_similarity(model, img_emb: torch.Tensor, n_real: list[int], cap_emb: torch.Tensor,
                   lengths: torch.Tensor) -> torch.Tensor:
    sim = model.sim_enc
    img_glo = ref_visual_sa(sim.v_global_w, img_emb, n_real)
    scores = torch.zeros(len(img_emb), len(cap_emb))
    for c in range(len(cap_emb)):                     # one caption at a time, as released
        words = cap_emb[c, :int(lengths[c])]
        for i in range(len(img_emb)):
            nodes = ref_nodes(sim, img_emb[i, :n_real[i]], img_glo[i], words)
            if sim.module_name == "SGR":
                for step in sim.SGR_module:
                    nodes = ref_sgr_step(step, nodes)
                vec = nodes[0]
            else:
                vec = ref_saf(sim.SAF_module, nodes)
            scores[i, c] = torch.sigmoid(linear(sim.sim_eval_w, vec))[0]
    return scores


def encode(model, regions, tokens, lengths, num_regions=None):
    with torch.no_grad():
        return model.encode_images(regions, num_regions), model.encode_captions(tokens, lengths)


def fill_padding(cap_emb: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Garbage at padded word positions: the result must not depend on what is there."""
    pad = ~sgraf_module.length_mask(lengths, cap_emb.size(1))
    noise = torch.randn(cap_emb.shape, generator=torch.Generator().manual_seed(9))
    return torch.where(pad.unsqueeze(2), noise, cap_emb)


# ---------- tests ----------

def test_text_encoder_ignores_padding_and_matches_gru_on_real_words():
    model = make_model("sgr")
    _, tokens, lengths = make_inputs()
    with torch.no_grad():
        batched = model.encode_captions(tokens, lengths)
        for c in range(len(lengths)):
            n = int(lengths[c])
            out, _ = model.txt_enc.cap_rnn(model.txt_enc.embed(tokens[c:c + 1, :n]))
            half = out.size(2) // 2
            direct = l2((out[..., :half] + out[..., half:]) / 2)[0]
            torch.testing.assert_close(batched[c, :n], direct, atol=1e-6, rtol=0)
            assert batched[c, n:].abs().sum().item() == 0


def test_image_encoder_zeroes_padded_regions():
    model = make_model("sgr")
    regions, _, _ = make_inputs()
    with torch.no_grad():
        emb = model.encode_images(regions, torch.tensor([5, 2, 5, 3]))
    direct = l2(linear(model.img_enc.fc, regions))
    torch.testing.assert_close(emb[0], direct[0])
    assert emb[1, 2:].abs().max().item() == 0 and emb[3, 3:].abs().max().item() == 0
    torch.testing.assert_close(emb[1, :2], direct[1, :2])
    assert sgraf_module.region_mask(emb).sum(1).tolist() == [5, 2, 5, 3]

# batched attention and softmax sums run in another order than the per-caption reference; these two comparisons
# (values of order 1) failed at 1e-6 on the CI machine while passing here, as CPU kernels sum in other orders
FP32_ORDER_TOLERANCE = 1e-5


def test_attention_block_matches_direct_per_caption():
    model = make_model("sgr")
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths)
    cap_emb = fill_padding(cap_emb, lengths)
    mask = sgraf_module.length_mask(lengths, cap_emb.size(1))
    with torch.no_grad():
        context = l2(model.sim_enc.attend(img_emb, cap_emb, mask))
    for c in range(len(lengths)):
        n = int(lengths[c])
        for i in range(len(img_emb)):
            torch.testing.assert_close(context[i, c, :n], ref_attention(img_emb[i], cap_emb[c, :n]),
                                       atol=FP32_ORDER_TOLERANCE, rtol=0)


def test_similarity_vectors_match_direct():
    model = make_model("saf")
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths)
    sim = model.sim_enc
    mask = sgraf_module.length_mask(lengths, cap_emb.size(1))
    with torch.no_grad():
        img_glo = sim.v_global_w(img_emb, torch.ones(img_emb.shape[:2], dtype=torch.bool))
        cap_glo = sim.t_global_w(cap_emb, lengths)
        nodes = sim.nodes(img_emb, img_glo, cap_emb, mask, cap_glo)
    ref_glo = ref_visual_sa(sim.v_global_w, img_emb, [5] * len(img_emb))
    torch.testing.assert_close(img_glo, ref_glo, atol=FP32_ORDER_TOLERANCE, rtol=0)
    for c in range(len(lengths)):
        n = int(lengths[c])
        torch.testing.assert_close(cap_glo[c], ref_text_sa(sim.t_global_w, cap_emb[c, :n]),
                                   atol=FP32_ORDER_TOLERANCE, rtol=0)
        for i in range(len(img_emb)):
            torch.testing.assert_close(nodes[i, c, :n + 1], ref_nodes(sim, img_emb[i], ref_glo[i], cap_emb[c, :n]),
                                       atol=FP32_ORDER_TOLERANCE, rtol=0)


def test_text_sa_ignores_padding():
    model = make_model("sgr")
    gen = torch.Generator().manual_seed(3)
    words = torch.randn(3, 8, SIZES["embed_size"], generator=gen)
    lengths = torch.tensor([3, 8, 5])
    with torch.no_grad():
        batched = model.sim_enc.t_global_w(words, lengths)
        alone = model.sim_enc.t_global_w(words[:1, :3], lengths[:1])
    torch.testing.assert_close(batched[0], alone[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(batched[0], ref_text_sa(model.sim_enc.t_global_w, words[0, :3]), atol=1e-6, rtol=0)


def test_visual_sa_with_padded_regions_matches_direct():
    model = make_model("sgr")
    regions, _, _ = make_inputs()
    num_regions = torch.tensor([5, 2, 4, 5])
    with torch.no_grad():
        emb = model.encode_images(regions, num_regions)
        glo = model.sim_enc.v_global_w(emb, sgraf_module.region_mask(emb))
    torch.testing.assert_close(glo, ref_visual_sa(model.sim_enc.v_global_w, emb, num_regions.tolist()),
                               atol=1e-6, rtol=0)


def test_one_sgr_step_and_its_first_node_match_direct():
    model = make_model("sgr")
    step = model.sim_enc.SGR_module[0]
    with torch.no_grad():
        step.graph_key_w.bias.uniform_(-0.5, 0.5)
        step.graph_query_w.bias.uniform_(-0.5, 0.5)
    gen = torch.Generator().manual_seed(4)
    nodes = torch.randn(2, 3, 6, SIZES["sim_dim"], generator=gen)
    real = torch.tensor([6, 2, 4])
    mask = sgraf_module.length_mask(real, 6).expand(2, 3, 6).reshape(6, 6)
    with torch.no_grad():
        full = step(nodes.reshape(6, 6, -1), mask).view(2, 3, 6, -1)
        first = step.first_node(nodes.reshape(6, 6, -1), mask).view(2, 3, -1)
    for i in range(2):
        for c in range(3):
            n = int(real[c])
            expected = ref_sgr_step(step, nodes[i, c, :n])
            torch.testing.assert_close(full[i, c, :n], expected, atol=1e-6, rtol=0)
            torch.testing.assert_close(first[i, c], expected[0], atol=1e-6, rtol=0)


def test_saf_matches_direct():
    model = make_model("saf")
    saf = model.sim_enc.SAF_module
    gen = torch.Generator().manual_seed(5)
    nodes = torch.randn(2, 3, 6, SIZES["sim_dim"], generator=gen)
    real = torch.tensor([6, 2, 4])
    with torch.no_grad():
        vec, stats = saf(nodes, sgraf_module.length_mask(real, 6))
    assert stats is None
    for i in range(2):
        for c in range(3):
            torch.testing.assert_close(vec[i, c], ref_saf(saf, nodes[i, c, :int(real[c])]), atol=1e-6, rtol=0)


def test_saf_training_batchnorm_is_per_caption_as_released():
    model = make_model("saf")
    saf = model.sim_enc.SAF_module.train()
    gen = torch.Generator().manual_seed(6)
    nodes = torch.randn(3, 4, 7, SIZES["sim_dim"], generator=gen)
    real = torch.tensor([7, 3, 5, 2])
    mean, var = saf.bn.running_mean.clone(), saf.bn.running_var.clone()
    with torch.no_grad():
        vec, stats = saf(nodes, sgraf_module.length_mask(real, 7))
        saf.update_running_stats(stats)
        for c in range(4):                              # the released code: one BatchNorm call per caption
            sub = nodes[:, c, :int(real[c])]
            a = F.batch_norm(linear(saf.attn_sim_w, sub).permute(0, 2, 1), mean, var, saf.bn.weight, saf.bn.bias,
                             training=True, momentum=saf.bn.momentum, eps=saf.bn.eps)
            beta = torch.sigmoid(a)
            beta = beta / (beta.abs().sum(-1, keepdim=True) + EPS)
            torch.testing.assert_close(vec[:, c], l2((beta @ sub).squeeze(1)), atol=1e-6, rtol=0)
    torch.testing.assert_close(saf.bn.running_mean, mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(saf.bn.running_var, var, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_batched_similarity_matches_per_caption_loop(name):
    model = make_model(name)
    regions, tokens, lengths = make_inputs()
    num_regions = torch.tensor([5, 3, 5, 4])
    img_emb, cap_emb = encode(model, regions, tokens, lengths, num_regions)
    with torch.no_grad():
        batched = model.similarity(img_emb, fill_padding(cap_emb, lengths), lengths)
        reference = ref_similarity(model, img_emb, num_regions.tolist(), cap_emb, lengths)
    assert batched.shape == (4, 6)
    torch.testing.assert_close(batched, reference, atol=1e-5, rtol=0)
    assert (batched - reference).abs().max().item() < 1e-5


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_caption_score_does_not_depend_on_batch(name, monkeypatch):
    model = make_model(name)
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths)
    with torch.no_grad():
        batched = model.similarity(img_emb, cap_emb, lengths)
        alone = model.similarity(img_emb, cap_emb[2:3, :3], lengths[2:3])
        images_split = torch.cat([model.similarity(img_emb[i:i + 1], cap_emb, lengths) for i in range(4)])
        monkeypatch.setattr(sgraf_module, "CHUNK_ELEMENTS", 1)  # one caption per chunk
        chunked = model.similarity(img_emb, cap_emb, lengths)
    torch.testing.assert_close(batched[:, 2:3], alone, atol=1e-6, rtol=0)
    torch.testing.assert_close(batched, images_split, atol=1e-6, rtol=0)
    torch.testing.assert_close(batched, chunked, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_training_mode_dropout_and_gradients(name):
    model = make_model(name).train()
    regions, tokens, lengths = make_inputs(n_img=6)
    first = model(regions, None, tokens, lengths)
    second = model(regions, None, tokens, lengths)
    assert first.shape == (6, 6) and not torch.allclose(first, second)   # dropout 0.4 is active
    first.diagonal().sum().backward()
    for key, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), key
    # a bias added to every logit of a softmax cannot change it: its gradient is zero (also in the released code)
    invariant = ("embedding_common.0.bias", "graph_key_w.bias")
    for key, param in model.named_parameters():
        assert key.endswith(invariant) or param.grad.abs().sum().item() > 0, key


def test_config_errors():
    assert default_config("sgr")["sgr_step"] == 3 and default_config("saf")["lambda_softmax"] == 9.0
    with pytest.raises(VLToolsError, match="no setting"):
        build_model("sgr", {"embed_sise": 3}, VOCAB)
    with pytest.raises(VLToolsError, match="unknown model"):
        build_model("sgraf", {}, VOCAB)
    model = make_model("sgr")
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, torch.cat([regions, regions], 1), tokens, lengths)
    with pytest.raises(VLToolsError, match="num_regions=5"):
        model.similarity(img_emb, cap_emb, lengths)


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_bf16_autocast_runs_and_stays_close(name):
    model = make_model(name)
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths)
    with torch.inference_mode():
        fp32 = model.similarity(img_emb, cap_emb, lengths)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model.similarity(img_emb, cap_emb, lengths)
    assert bf16.dtype == torch.float32   # scores leave the model in float32 (ranking resolution)
    torch.testing.assert_close(bf16, fp32, atol=2e-2, rtol=0)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_low_precision_inference_of_padded_images_is_finite_and_close(name, precision):
    """Encoding and scoring under autocast, as match runs them: in float16 the norms' eps 1e-8 was zero, so an
    image with padded regions (zero rows: their word logits zero too) gave 0 / 0 = NaN for every caption."""
    model = make_model(name)
    regions, tokens, lengths = make_inputs()
    num_regions = torch.tensor([SIZES["num_regions"], 2, 1, 3])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scores = {}
    for low in (False, True):
        with torch.inference_mode(), torch.autocast("cpu", dtype=dtype, enabled=low):
            img_emb, cap_emb = model.encode_images(regions, num_regions), model.encode_captions(tokens, lengths)
            scores[low] = model.similarity(img_emb, cap_emb, lengths)
    assert scores[True].dtype == torch.float32 and torch.isfinite(scores[True]).all()
    torch.testing.assert_close(scores[True], scores[False], atol=2e-2, rtol=0)


def test_fused_local_similarity_backward_is_the_derivative():
    # float64 finite differences against the hand-written backward (inputs: attention, regions, words, W)
    gen = torch.Generator().manual_seed(3)
    regions = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)
    alpha = torch.rand(3, 4, 2 * 5, generator=gen, dtype=torch.float64).softmax(dim=1)
    words = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64)
    weight = torch.randn(7, 6, generator=gen, dtype=torch.float64)
    inputs = tuple(x.requires_grad_() for x in (alpha, regions, words, weight))
    assert torch.autograd.gradcheck(sgraf_module.LocalSimilarity.apply, inputs)
    u = torch.bmm(alpha.transpose(1, 2), regions).view(3, 2, 5, 6)
    direct = F.linear((u / (u.norm(dim=-1, keepdim=True) + EPS) - words) ** 2, weight)
    torch.testing.assert_close(sgraf_module.LocalSimilarity.apply(*inputs), direct)



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_local_similarity_trains_under_cuda_s_autocast_lists(dtype):
    """On CUDA, autocast computes the norm in float32 while the products run in bf16 / fp16; the hand-written
    backward then met a float32 gradient and a bf16 tensor in one product (issue 37). Emulated here: the function
    runs in autocast's dtype throughout and its gradients are those of float32 within that dtype's rounding."""
    gen = torch.Generator().manual_seed(3)
    regions = F.normalize(torch.randn(3, 4, 6, generator=gen), dim=-1)
    alpha = torch.rand(3, 4, 2 * 5, generator=gen).softmax(dim=1)
    words = F.normalize(torch.randn(2, 5, 6, generator=gen), dim=-1)
    weight = torch.randn(7, 6, generator=gen)

    def gradients(low: bool) -> list[torch.Tensor]:
        inputs = [x.clone().requires_grad_() for x in (alpha, regions, words, weight)]
        with cuda_float32_ops(), torch.autocast("cpu", dtype=dtype, enabled=low):
            out = sgraf_module.LocalSimilarity.apply(*inputs)
        assert out.dtype == (dtype if low else torch.float32)
        out.float().square().sum().backward()
        return [x.grad for x in inputs]

    for low, full in zip(gradients(True), gradients(False), strict=True):
        assert low.dtype == torch.float32 and torch.isfinite(low).all()
        torch.testing.assert_close(low, full, rtol=0, atol=0.05 * float(full.abs().max()))

@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_training_loss_and_gradients_equal_the_per_caption_computation(name):
    # captions of very different lengths (2 to 30 words), images with padded regions; eval-mode BatchNorm so
    # that the per-caption reference applies, gradients on (the fused training path runs whenever they are)
    model = make_model(name)
    regions, tokens, lengths = make_inputs(n_img=6, lengths=(30, 2, 17, 5, 23, 3))
    num_regions = torch.tensor([5, 3, 5, 4, 2, 5])
    weights = torch.rand(6, 6, generator=torch.Generator().manual_seed(4))

    def loss_and_grads(similarity):
        model.zero_grad()
        img_emb = model.encode_images(regions, num_regions)
        cap_emb = model.encode_captions(tokens, lengths)
        loss = (similarity(img_emb, cap_emb) * weights).sum()
        loss.backward()
        return loss.item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads(lambda img, cap: model.similarity(img, cap, lengths))
    ref_loss, ref_grads = loss_and_grads(lambda img, cap: ref_similarity(model, img, num_regions.tolist(), cap,
                                                                        lengths))
    assert loss == pytest.approx(ref_loss, abs=1e-5)
    assert grads.keys() == ref_grads.keys()
    for key, ref in ref_grads.items():
        torch.testing.assert_close(grads[key], ref, atol=1e-5 * max(1.0, ref.abs().max().item()), rtol=1e-4,
                                   msg=key)


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_given_global_vectors_of_a_larger_block_give_the_same_scores(name):
    # reranking computes the self-attended globals once per block and scores slices of it
    model = make_model(name)
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths, torch.tensor([5, 3, 5, 4]))
    with torch.no_grad():
        img_glo, cap_glo = model.global_images(img_emb), model.global_captions(cap_emb, lengths)
        pick = torch.tensor([4, 1])
        given = model.similarity(img_emb[2:3], cap_emb[pick], lengths[pick], img_glo[2:3], cap_glo[pick])
        direct = model.similarity(img_emb[2:3], cap_emb[pick], lengths[pick])
        reference = ref_similarity(model, img_emb[2:3], [5], cap_emb[pick], lengths[pick])
    torch.testing.assert_close(given, direct, atol=1e-6, rtol=0)
    torch.testing.assert_close(given, reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["sgr", "saf"])
def test_block_kernel_equals_per_caption_computation_at_official_sizes(name, monkeypatch):
    # official sizes (36 regions of 2048, embed 1024, sim 256, 3 SGR steps); ragged captions (2 to 57 tokens, two of
    # the same length, so one length group has two captions) and padded regions; non-zero biases (the released
    # init zeroes them, which would hide a dropped bias term)
    torch.manual_seed(0)
    model = build_model(name, {}, VOCAB).eval()
    with torch.no_grad():
        for key, param in model.named_parameters():
            if key.endswith(".bias"):
                param.uniform_(-0.2, 0.2)
        if name == "saf":
            model.sim_enc.SAF_module.bn.running_mean.fill_(0.3)
            model.sim_enc.SAF_module.bn.running_var.fill_(2.0)
    gen = torch.Generator().manual_seed(11)
    regions = torch.randn(3, 36, 2048, generator=gen)
    num_regions = torch.tensor([36, 20, 7])
    lengths = torch.tensor([13, 2, 57, 13, 30])
    tokens = torch.randint(4, VOCAB, (5, 57), generator=gen) * (torch.arange(57) < lengths[:, None])
    img_emb, cap_emb = encode(model, regions, tokens, lengths, num_regions)
    cap_emb = fill_padding(cap_emb, lengths)
    calls = []
    kernel = sgraf_module.EncoderSimilarity.block_scores

    def spy(self, *args):
        calls.append(args[2].shape)
        return kernel(self, *args)

    def scores() -> dict[str, torch.Tensor]:
        monkeypatch.setattr(sgraf_module.EncoderSimilarity, "block_scores", spy)
        with torch.inference_mode():
            block = model.similarity(img_emb, cap_emb, lengths)
            monkeypatch.setattr(sgraf_module, "CACHE_ELEMENTS", 1)      # passes of one image x one caption
            one_by_one = model.similarity(img_emb, cap_emb, lengths)
            monkeypatch.setattr(sgraf_module, "BLOCK_KERNEL", False)    # the general path (training's)
            general = model.similarity(img_emb, cap_emb, lengths)
        monkeypatch.undo()
        reference = ref_similarity(model, img_emb, num_regions.tolist(), cap_emb, lengths)
        return {"block": block, "one_by_one": one_by_one, "general": general, "reference": reference}

    found = scores()
    assert len(calls) == 2                                              # the kernel ran, and only where enabled
    torch.testing.assert_close(found["block"], found["reference"], atol=1e-5, rtol=0)
    torch.testing.assert_close(found["block"], found["general"], atol=1e-5, rtol=0)
    torch.testing.assert_close(found["one_by_one"], found["block"], atol=1e-6, rtol=0)
    # at random init the scores lie within 1e-3 of each other, so 1e-5 is a weak check: rescale the score head so
    # that its logits z become 3 (z - mean z) / std z (scores spread over (0, 1)); rounding is amplified as much
    # (about 40x here), a wrong node moves the scores by 1e-2
    with torch.no_grad():
        head = model.sim_enc.sim_eval_w
        logits = torch.logit(found["general"].double())
        scale = 3 / logits.std().item()
        head.weight.mul_(scale)
        head.bias.sub_(logits.mean().item()).mul_(scale)
    found = scores()
    assert found["block"].std() > 0.1
    torch.testing.assert_close(found["block"], found["reference"], atol=1e-4, rtol=0)
    torch.testing.assert_close(found["block"], found["general"], atol=1e-4, rtol=0)


def test_block_kernel_only_without_gradients_autocast_or_training():
    model = make_model("sgr")
    regions, tokens, lengths = make_inputs()
    img_emb, cap_emb = encode(model, regions, tokens, lengths)
    sim = model.sim_enc
    with torch.no_grad():
        assert sim.inference_kernel(img_emb, lengths)
        assert not sim.inference_kernel(img_emb, torch.tensor([3, 0]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not sim.inference_kernel(img_emb, lengths)
        assert not model.train().sim_enc.inference_kernel(img_emb, lengths)
    model.eval()
    assert not sim.inference_kernel(img_emb, lengths)                # gradients on: the fused training path
