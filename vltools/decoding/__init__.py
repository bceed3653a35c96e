"""Decoding captions from any step function: batched beam search, greedy and sampling (vltools.decoding.search).

Usage, with a decoder from vltools.models.decoder (any `step(tokens, state, static) -> (logp, state)`
works: `state` and `static` are dicts of tensors with the batch as first dimension)::

    state, static = decoder.init_state(cond)
    out = beam_search(decoder.step, state, static, beam_size=3, max_len=16)
    out.tokens        # [B, L] words then <end>, right-padded with <pad> (no <start>)
    out.logprob       # [B] the model's log p(caption | image), <end> included
    greedy(decoder.step, state, static, max_len=16)                       # = beam_search(beam_size=1)
    sample(decoder.step, state, static, temperature=0.7, generator=gen)   # multinomial, per-step temperature

All images and all their beams advance together (one step call over batch x beam rows); a caption
ends at its first `<end>` (never repeated); at most `max_len` words, after which `<end>` is forced.
"""

from vltools.decoding.search import Decoded, beam_search, greedy, sample

__all__ = ["Decoded", "beam_search", "greedy", "sample"]
