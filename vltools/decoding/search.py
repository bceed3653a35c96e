"""Batched beam search, greedy decoding and sampling over a generic step function (see vltools.decoding).

Beam search keeps `beam_size` hypotheses per image, all images at once: each step scores every
(hypothesis, next word) candidate by the sum of the model's token log-probabilities and keeps the
best `beam_size` per image. A hypothesis that has produced `<end>` stays in the beam with its score
and competes with the open ones (it is extended by `<pad>` at no cost), so the search stops exactly
when every image's best `beam_size` hypotheses are finished. With `length_penalty` alpha > 0 the
final choice among an image's finished hypotheses is by score / length**alpha (length counts `<end>`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from vltools.text.vocab import END, PAD, SPECIALS, START

State = dict[str, torch.Tensor]
StepFunction = Callable[[torch.Tensor, State, State], tuple[torch.Tensor, State]]

PAD_ID, START_ID, END_ID = SPECIALS.index(PAD), SPECIALS.index(START), SPECIALS.index(END)
NEVER = (PAD_ID, START_ID)   # ids never generated


@dataclass
class Decoded:
    """Decoded captions: tokens [B, L] (words, `<end>`, then `<pad>`), their log-probabilities [B], and for
    beam search every final hypothesis (`beams` [B, beam, L], `beam_logprob` [B, beam], best first)."""

    tokens: torch.Tensor
    logprob: torch.Tensor
    beams: torch.Tensor | None = None
    beam_logprob: torch.Tensor | None = None


def _batch_size(state: State) -> int:
    return next(iter(state.values())).size(0)


def _rows(state: State, index: torch.Tensor) -> State:
    return {k: v.index_select(0, index) for k, v in state.items()}


def _allowed(logp: torch.Tensor, step: int, max_len: int, eos: int, never: Sequence[int]) -> torch.Tensor:
    """`logp` with never-generated ids at -inf, and only `<end>` allowed once `max_len` words are out."""
    banned = torch.zeros(logp.size(1), dtype=torch.bool, device=logp.device)
    if step >= max_len:
        banned[:] = True
        banned[eos] = False
    else:
        banned[list(never)] = True
    return logp.masked_fill(banned, float("-inf"))


def beam_search(step: StepFunction, state: State, static: State, beam_size: int = 3, max_len: int = 16,
                length_penalty: float = 0.0, bos: int = START_ID, eos: int = END_ID, pad: int = PAD_ID,
                never: Sequence[int] = NEVER) -> Decoded:
    """The best of `beam_size` hypotheses per image, all images and beams in one step call per position."""
    batch = _batch_size(state)
    index = torch.arange(batch, device=next(iter(state.values())).device).repeat_interleave(beam_size)
    state, static = _rows(state, index), _rows(static, index)
    device, n = index.device, batch * beam_size
    tokens = torch.full((n,), bos, dtype=torch.long, device=device)
    scores = torch.zeros(batch, beam_size, device=device)
    scores[:, 1:] = float("-inf")          # the first step expands the first beam only
    history = torch.zeros(n, 0, dtype=torch.long, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    base = torch.arange(batch, device=device).unsqueeze(1) * beam_size
    for position in range(max_len + 1):
        logp, state = step(tokens, state, static)
        logp = _allowed(logp.float(), position, max_len, eos, never)
        vocab = logp.size(1)
        carry = torch.full((vocab,), float("-inf"), device=device)
        carry[pad] = 0.0
        logp = torch.where(finished.unsqueeze(1), carry, logp)
        candidates = (scores.reshape(n, 1) + logp).reshape(batch, beam_size * vocab)
        scores, chosen = candidates.topk(beam_size, dim=1)
        rows = (base + torch.div(chosen, vocab, rounding_mode="floor")).reshape(-1)
        tokens = (chosen % vocab).reshape(-1)
        state = _rows(state, rows)
        history = torch.cat([history.index_select(0, rows), tokens.unsqueeze(1)], 1)
        finished = finished.index_select(0, rows) | (tokens == eos)
        if bool(finished.all()):
            break
    beams = history.reshape(batch, beam_size, -1)
    ranking = scores
    if length_penalty:
        lengths = (beams != pad).sum(2).clamp(min=1).float()
        ranking = scores / lengths ** length_penalty
    order = ranking.argsort(dim=1, descending=True, stable=True)
    beams = beams.gather(1, order.unsqueeze(2).expand_as(beams))
    scores = scores.gather(1, order)
    return Decoded(beams[:, 0], scores[:, 0], beams, scores)


def _one_by_one(step: StepFunction, state: State, static: State, max_len: int, eos: int, pad: int, bos: int,
                never: Sequence[int], pick: Callable[[torch.Tensor], torch.Tensor]) -> Decoded:
    """Extend each caption by `pick(logp)` (one word per row) until all have ended."""
    batch = _batch_size(state)
    device = next(iter(state.values())).device
    tokens = torch.full((batch,), bos, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    total = torch.zeros(batch, device=device)
    out = []
    for position in range(max_len + 1):
        logp, state = step(tokens, state, static)
        logp = _allowed(logp.float(), position, max_len, eos, never)
        word = pick(logp)
        gained = logp.gather(1, word.unsqueeze(1)).squeeze(1)
        total = total + gained.masked_fill(finished, 0.0)
        tokens = word.masked_fill(finished, pad)
        out.append(tokens)
        finished = finished | (tokens == eos)
        if bool(finished.all()):
            break
    return Decoded(torch.stack(out, 1), total)


def greedy(step: StepFunction, state: State, static: State, max_len: int = 16, bos: int = START_ID,
           eos: int = END_ID, pad: int = PAD_ID, never: Sequence[int] = NEVER) -> Decoded:
    """The most probable word at each step (the same captions as beam_search with beam_size=1)."""
    return _one_by_one(step, state, static, max_len, eos, pad, bos, never, lambda logp: logp.argmax(1))


def sample(step: StepFunction, state: State, static: State, max_len: int = 16, temperature: float = 1.0,
           generator: torch.Generator | None = None, bos: int = START_ID, eos: int = END_ID, pad: int = PAD_ID,
           never: Sequence[int] = NEVER) -> Decoded:
    """Words drawn from softmax(logp / temperature) at each step; `logprob` is the model's own (untempered)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, not {temperature}")

    def pick(logp: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logp / temperature, dim=1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return _one_by_one(step, state, static, max_len, eos, pad, bos, never, pick)
