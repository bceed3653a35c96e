"""Batched beam search against a per-image reference written here; greedy = beam 1; sampling; lengths."""

from __future__ import annotations

import pytest
import torch

from vltools.decoding import beam_search, greedy, sample
from vltools.losses import sequence_logprob
from vltools.models.decoder import Conditioning, LSTMDecoder

V = 9


def make_decoder(seed: int = 0) -> tuple[LSTMDecoder, Conditioning]:
    torch.manual_seed(seed)
    decoder = LSTMDecoder(V, embed_size=8, hidden_size=12, init_size=5).eval()
    with torch.no_grad():
        decoder.output.weight.mul_(4.0)
        decoder.output.bias[2] += 1.0       # <end> likely enough that captions end at various lengths
    cond = Conditioning(init=torch.randn(7, 5, generator=torch.Generator().manual_seed(seed + 1)))
    return decoder, cond


def reference_beam(decoder: LSTMDecoder, cond: Conditioning, image: int, beam: int, max_len: int):
    """One image at a time, one hypothesis at a time, every candidate in a Python list."""
    state, static = decoder.init_state(Conditioning(init=cond.init[image:image + 1]))
    hyps = [(0.0, [], state, False)]
    for position in range(max_len + 1):
        candidates = []
        for score, words, st, done in hyps:
            if done:
                candidates.append((score, words + [0], st, True))
                continue
            logp, new = decoder.step(torch.tensor([words[-1] if words else 1]), st, static)
            for w in range(V):
                if (position == max_len and w != 2) or (position < max_len and w in (0, 1)):
                    continue
                candidates.append((score + float(logp[0, w]), words + [w], new, w == 2))
        candidates.sort(key=lambda c: -c[0])
        hyps = candidates[:beam]
        if all(h[3] for h in hyps):
            break
    return hyps[0][1], hyps[0][0]


@pytest.mark.parametrize("beam,max_len", [(3, 6), (2, 3), (5, 8)])
@torch.no_grad()
def test_batched_beam_search_equals_per_image_reference(beam, max_len):
    decoder, cond = make_decoder()
    out = beam_search(decoder.step, *decoder.init_state(cond), beam_size=beam, max_len=max_len)
    for image in range(7):
        words, score = reference_beam(decoder, cond, image, beam, max_len)
        assert out.tokens[image, :len(words)].tolist() == words
        assert out.tokens[image, len(words):].eq(0).all()
        assert out.logprob[image].item() == pytest.approx(score, abs=1e-4)
    lengths = (out.tokens != 0).sum(1)
    assert lengths.max() <= max_len + 1 and (out.tokens == 2).sum(1).eq(1).all()   # one <end>, max_len words


@torch.no_grad()
def test_beam_logprob_is_the_teacher_forced_caption_logprob():
    decoder, cond = make_decoder(3)
    out = beam_search(decoder.step, *decoder.init_state(cond), beam_size=3, max_len=6)
    tokens = torch.cat([torch.ones(7, 1, dtype=torch.long), out.tokens], 1)
    torch.testing.assert_close(sequence_logprob(decoder(cond, tokens), tokens[:, 1:]), out.logprob)
    assert (out.beam_logprob[:, :-1] >= out.beam_logprob[:, 1:]).all()


def pad_to(tokens: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(tokens, (0, width - tokens.size(1)))


@torch.no_grad()
def test_beam_one_equals_greedy():
    for seed in range(3):
        decoder, cond = make_decoder(seed)
        beam = beam_search(decoder.step, *decoder.init_state(cond), beam_size=1, max_len=10)
        best = greedy(decoder.step, *decoder.init_state(cond), max_len=10)
        width = max(beam.tokens.size(1), best.tokens.size(1))
        assert torch.equal(pad_to(beam.tokens, width), pad_to(best.tokens, width))
        torch.testing.assert_close(beam.logprob, best.logprob)


@torch.no_grad()
def test_length_penalty_prefers_longer_captions():
    decoder, cond = make_decoder(1)
    plain = beam_search(decoder.step, *decoder.init_state(cond), beam_size=5, max_len=8)
    long = beam_search(decoder.step, *decoder.init_state(cond), beam_size=5, max_len=8, length_penalty=2.0)
    assert (long.tokens != 0).sum(1).float().mean() > (plain.tokens != 0).sum(1).float().mean()
    assert (long.logprob <= plain.logprob + 1e-6).all()


@torch.no_grad()
def test_sampling_follows_the_tempered_distribution():
    logits = torch.tensor([0.0, 0.0, 1.0, 0.5, -0.5])   # <end> at 2; ids 0 and 1 are never drawn

    def step(tokens, state, static):
        return torch.log_softmax(logits.expand(tokens.size(0), -1), 1), state

    state = {"h": torch.zeros(4000, 1)}
    out = sample(step, state, {}, max_len=1, temperature=0.5, generator=torch.Generator().manual_seed(0))
    allowed = torch.softmax(logits[2:] / 0.5, 0)
    frequencies = torch.bincount(out.tokens[:, 0], minlength=5)[2:].float() / 4000
    torch.testing.assert_close(frequencies, allowed, atol=0.03, rtol=0)
    assert (out.tokens[:, 1][out.tokens[:, 0] != 2] == 2).all()     # max_len 1: <end> forced after one word
    again = sample(step, state, {}, max_len=1, temperature=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.tokens, out.tokens)
    with pytest.raises(ValueError):
        sample(step, state, {}, temperature=0.0)
