"""The shared LSTM decoder against torch's own nn.LSTM, and its attention against the formulas by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vltools.models.decoder import AdditiveAttention, Conditioning, LSTMDecoder

V, E, H = 11, 6, 8


def torch_lstm(decoder: LSTMDecoder) -> nn.LSTM:
    lstm = nn.LSTM(decoder.lstm.input_size, H, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, f"{name}_l0").copy_(getattr(decoder.lstm, name))
    return lstm


def tokens_batch(gen: torch.Generator) -> torch.Tensor:
    tokens = torch.randint(3, V, (3, 6), generator=gen)
    tokens[:, 0] = 1
    tokens[0, 4], tokens[0, 5] = 2, 0
    return tokens


def test_first_input_conditioning_equals_nn_lstm_over_image_then_words():
    torch.manual_seed(0)
    decoder = LSTMDecoder(V, embed_size=E, hidden_size=H).eval()
    gen = torch.Generator().manual_seed(1)
    image, tokens = torch.randn(3, E, generator=gen), tokens_batch(gen)
    logp = decoder(Conditioning(first_input=image), tokens)
    sequence = torch.cat([image.unsqueeze(1), decoder.embed(tokens[:, :-1])], 1)
    hidden, _ = torch_lstm(decoder)(sequence)
    expected = torch.log_softmax(decoder.output(hidden[:, 1:]), -1)
    assert logp.shape == (3, 5, V)
    torch.testing.assert_close(logp, expected, atol=1e-6, rtol=1e-5)


def test_init_conditioning_sets_h0_c0_and_step_input_is_concatenated():
    torch.manual_seed(0)
    decoder = LSTMDecoder(V, embed_size=E, hidden_size=H, init_size=5, step_input_size=4).eval()
    gen = torch.Generator().manual_seed(2)
    fused, extra, tokens = torch.randn(3, 5, generator=gen), torch.randn(3, 4, generator=gen), tokens_batch(gen)
    logp = decoder(Conditioning(init=fused, step_input=extra), tokens)
    words = decoder.embed(tokens[:, :-1])
    sequence = torch.cat([words, extra.unsqueeze(1).expand(-1, words.size(1), -1)], 2)
    h0, c0 = decoder.init_h(fused).unsqueeze(0), decoder.init_c(fused).unsqueeze(0)
    hidden, _ = torch_lstm(decoder)(sequence, (h0, c0))
    torch.testing.assert_close(logp, torch.log_softmax(decoder.output(hidden), -1), atol=1e-6, rtol=1e-5)


@torch.no_grad()
def test_additive_attention_with_sentinel_by_hand():
    torch.manual_seed(0)
    attention = AdditiveAttention(query_size=3, memory_size=4, hidden_size=5, sentinel=True)
    gen = torch.Generator().manual_seed(3)
    query, memory, sentinel = torch.randn(2, 3, generator=gen), torch.randn(2, 6, 4, generator=gen), \
        torch.randn(2, 4, generator=gen)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    context, weights = attention(query, memory, attention.project(memory), mask, sentinel)
    assert weights.shape == (2, 7)
    torch.testing.assert_close(weights.sum(1), torch.ones(2))
    w = attention.score.weight[0]
    for b in range(2):
        g = attention.query_proj(query[b])
        z = [float(w @ torch.tanh(attention.memory_proj(memory[b, i]) + g)) for i in range(6) if mask[b, i]]
        z.append(float(w @ torch.tanh(attention.sentinel_proj(sentinel[b]) + g)))
        alpha = torch.softmax(torch.tensor(z), 0)
        real = int(mask[b].sum())
        expected = (alpha[:real, None] * memory[b, :real]).sum(0) + alpha[-1] * sentinel[b]
        torch.testing.assert_close(weights[b, :real], alpha[:real])
        assert weights[b, real:6].abs().sum() == 0
        torch.testing.assert_close(context[b], expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("attention,sentinel", [("input", False), ("output", False), ("output", True)])
def test_attention_decoders_ignore_masked_memory_and_use_the_rest(attention, sentinel):
    torch.manual_seed(0)
    decoder = LSTMDecoder(V, embed_size=E, hidden_size=H, memory_size=H, attention=attention, attention_size=7,
                          sentinel=sentinel).eval()
    gen = torch.Generator().manual_seed(4)
    memory, tokens = torch.randn(3, 5, H, generator=gen), tokens_batch(gen)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[:, 3:] = False
    logp = decoder(Conditioning(memory=memory, memory_mask=mask), tokens)
    changed = memory.clone()
    changed[:, 3:] = 100.0
    torch.testing.assert_close(decoder(Conditioning(memory=changed, memory_mask=mask), tokens), logp)
    changed[:, 0] += 1.0
    assert not torch.allclose(decoder(Conditioning(memory=changed, memory_mask=mask), tokens), logp)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 5))


def test_bad_settings():
    with pytest.raises(ValueError, match="memory_size"):
        LSTMDecoder(V, hidden_size=8, memory_size=4, attention="output")
    with pytest.raises(ValueError, match="sentinel"):
        LSTMDecoder(V, memory_size=4, attention="input", sentinel=True)


@torch.no_grad()
def test_tied_output_is_the_word_embedding_transposed_as_sco_eq3():
    # hidden = embed size: q_t = softmax(F^T h_t + b_p) with F the embedding itself (no extra matrix)
    decoder = LSTMDecoder(3, embed_size=2, hidden_size=2, dropout=0.0, tied_output=True)
    decoder.embed.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, -1.0]]))
    decoder.output_bias.copy_(torch.tensor([0.5, 0.0, -0.5]))
    h = torch.tensor([[3.0, 1.0]])
    # F^T h: word 0: 3, word 1: 2, word 2: 3 - 1 = 2; plus b: 3.5, 2, 1.5
    torch.testing.assert_close(decoder.word_scores(h), torch.tensor([[3.5, 2.0, 1.5]]))
    assert not any(p.shape == (3, 2) for n, p in decoder.named_parameters() if not n.startswith("embed"))
    # hidden 4 > embed 2: a bias-free projection P first, F^T (P h) + b
    wide = LSTMDecoder(3, embed_size=2, hidden_size=4, dropout=0.0, tied_output=True)
    wide.embed.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, -1.0]]))
    wide.output.weight.copy_(torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, -1.0]]))
    wide.output_bias.zero_()
    h = torch.tensor([[1.0, 2.0, 2.0, 1.0]])        # P h = (3, 1): scores 3, 2, 2
    torch.testing.assert_close(wide.word_scores(h), torch.tensor([[3.0, 2.0, 2.0]]))
    assert wide.output.bias is None


def test_tied_output_gradient_reaches_the_embedding_from_the_output_side():
    torch.manual_seed(0)
    decoder = LSTMDecoder(V, embed_size=E, hidden_size=H, dropout=0.0, init_size=5, tied_output=True)
    gen = torch.Generator().manual_seed(4)
    tokens = tokens_batch(gen)
    logp = decoder(Conditioning(init=torch.randn(3, 5, generator=gen)), tokens)
    # <pad> (0) is never an input here, so its embedding row gets gradient only through the tied output layer
    assert not (tokens[:, :-1] == 0).any()
    logp[:, :, 0].sum().backward()
    assert decoder.embed.weight.grad[0].abs().sum() > 0
