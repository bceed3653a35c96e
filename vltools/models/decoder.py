"""The LSTM caption decoder every captioner shares: word embedding + LSTM cell + output layer.

What conditions it is pluggable (`Conditioning`, any combination; the sizes are constructor settings):

- `first_input` [B, embed_size]: fed to the LSTM before `<start>` (NeuralTalk2's image vector);
- `init` [B, init_size]: sets the initial state, h0 = W_h v and c0 = W_c v (SCO's fused vector);
- `step_input` [B, step_input_size]: concatenated to every word embedding (AdaptiveAttention's v_g);
- `memory` [B, N, memory_size] (+ `memory_mask` [B, N], True = real): attended at every step, either
  with h_{t-1} and the context fed to the LSTM (`attention="input"`, Show-Attend-Tell; L2C's K nodes),
  or with h_t and the output computed from context + h_t (`attention="output"`, Lu et al. 2017, which
  with `sentinel=True` is adaptive attention with a visual sentinel; memory_size must equal hidden_size).

Usage::

    decoder = LSTMDecoder(vocab_size, embed_size=512, hidden_size=512, init_size=1024)
    cond = Conditioning(init=fused)                              # [B, 1024]
    logp = decoder(cond, tokens)                                 # [B, L-1, V] log p(tokens[:, 1:])
    loss = sequence_cross_entropy(logp, tokens[:, 1:])           # vltools.losses
    state, static = decoder.init_state(cond)                     # for vltools.decoding: step(tokens, state,
    result = beam_search(decoder.step, state, static, ...)       #   static) -> (logp [N, V], state)

The step function's `state` (h, c) is reordered by beam search; `static` (memory and its projection,
step input) is only repeated per beam. Dropout (on word embeddings and before the output layer) acts
in training mode only; the teacher-forced forward runs the same `step` as decoding, so the two agree.
`tied_output=True` makes the output layer the word embedding F itself, q_t = softmax(F^T h_t + b) (SCO's Eq. 3),
with a bias-free projection of h_t to embed_size first when hidden_size differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

State = dict[str, torch.Tensor]


@dataclass
class Conditioning:
    """The image side of a decoder call; every tensor has the batch as its first dimension."""

    first_input: torch.Tensor | None = None
    init: torch.Tensor | None = None
    step_input: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    memory_mask: torch.Tensor | None = None

    def rows(self, index: torch.Tensor) -> Conditioning:
        """The conditioning of images `index` (e.g. one row per caption to score)."""
        def pick(tensor: torch.Tensor | None) -> torch.Tensor | None:
            return None if tensor is None else tensor.index_select(0, index)

        return Conditioning(pick(self.first_input), pick(self.init), pick(self.step_input), pick(self.memory),
                            pick(self.memory_mask))

    @property
    def batch_size(self) -> int:
        for value in (self.first_input, self.init, self.step_input, self.memory):
            if value is not None:
                return value.size(0)
        raise ValueError("a Conditioning needs at least one tensor")


class AdditiveAttention(nn.Module):
    """z_i = w^T tanh(W_v v_i + W_g q) over memory rows (Bahdanau; Lu et al. eq. 6), softmax, weighted sum.

    With `sentinel`, a sentinel vector s joins the softmax as an extra slot, z_s = w^T tanh(W_s s + W_g q)
    (Lu et al. eq. 12); the context is then beta s + sum_i alpha_i v_i, beta the sentinel's weight.
    """

    def __init__(self, query_size: int, memory_size: int, hidden_size: int = 512, sentinel: bool = False) -> None:
        super().__init__()
        self.memory_proj = nn.Linear(memory_size, hidden_size)
        self.query_proj = nn.Linear(query_size, hidden_size)
        self.score = nn.Linear(hidden_size, 1, bias=False)
        self.sentinel_proj = nn.Linear(memory_size, hidden_size) if sentinel else None

    def project(self, memory: torch.Tensor) -> torch.Tensor:
        """W_v v_i for every memory row, computed once per image and kept in the decoder's static state."""
        return self.memory_proj(memory)

    def forward(self, query: torch.Tensor, memory: torch.Tensor, projected: torch.Tensor,
                mask: torch.Tensor | None = None, sentinel: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(context [B, M], weights [B, N] or [B, N + 1] with the sentinel's weight last); weights sum to one."""
        q = self.query_proj(query)
        scores = self.score(torch.tanh(projected + q.unsqueeze(1))).squeeze(2)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        values = memory
        if sentinel is not None:
            assert self.sentinel_proj is not None, "this attention was built without a sentinel"
            sentinel_score = self.score(torch.tanh(self.sentinel_proj(sentinel) + q))
            scores = torch.cat([scores, sentinel_score], 1)
            values = torch.cat([memory, sentinel.unsqueeze(1)], 1)
        weights = torch.softmax(scores, dim=1)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights


class LSTMDecoder(nn.Module):
    """Embedding + LSTMCell + linear output over the vocabulary; see the module docstring for conditioning."""

    def __init__(self, vocab_size: int, embed_size: int = 512, hidden_size: int = 512, dropout: float = 0.5,
                 init_size: int = 0, step_input_size: int = 0, memory_size: int = 0, attention: str = "none",
                 attention_size: int = 512, sentinel: bool = False, tied_output: bool = False) -> None:
        super().__init__()
        if attention not in ("none", "input", "output"):
            raise ValueError(f"attention must be none, input or output, not {attention!r}")
        if attention != "none" and memory_size < 1:
            raise ValueError("attention needs memory_size")
        if attention == "output" and memory_size != hidden_size:
            raise ValueError(f"attention='output' adds the context to h_t: memory_size {memory_size} must equal "
                             f"hidden_size {hidden_size}")
        if sentinel and attention != "output":
            raise ValueError("the visual sentinel needs attention='output'")
        self.vocab_size, self.embed_size, self.hidden_size = vocab_size, embed_size, hidden_size
        self.attention, self.use_sentinel = attention, sentinel
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.dropout = nn.Dropout(dropout)
        input_size = embed_size + step_input_size + (memory_size if attention == "input" else 0)
        self.lstm = nn.LSTMCell(input_size, hidden_size)
        self.init_h = nn.Linear(init_size, hidden_size) if init_size else None
        self.init_c = nn.Linear(init_size, hidden_size) if init_size else None
        self.attend = (AdditiveAttention(hidden_size, memory_size, attention_size, sentinel)
                       if attention != "none" else None)
        self.sentinel_x = nn.Linear(input_size, hidden_size) if sentinel else None
        self.sentinel_h = nn.Linear(hidden_size, hidden_size, bias=False) if sentinel else None
        if tied_output:
            self.output = (nn.Linear(hidden_size, embed_size, bias=False) if hidden_size != embed_size
                           else nn.Identity())
            self.output_bias: nn.Parameter | None = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.output = nn.Linear(hidden_size, vocab_size)
            self.output_bias = None

    def init_state(self, cond: Conditioning) -> tuple[State, State]:
        """(state, static) ready for the first token (`<start>`): runs the first input through the LSTM if any."""
        batch = cond.batch_size
        if cond.init is not None:
            h, c = self.init_h(cond.init), self.init_c(cond.init)
        else:
            weight = self.embed.weight
            h = c = torch.zeros(batch, self.hidden_size, dtype=weight.dtype, device=weight.device)
        static: State = {}
        if cond.step_input is not None:
            static["step_input"] = cond.step_input
        if self.attend is not None:
            if cond.memory is None:
                raise ValueError("this decoder attends over a memory; give Conditioning.memory")
            static["memory"] = cond.memory
            static["projected"] = self.attend.project(cond.memory)
            if cond.memory_mask is not None:
                static["memory_mask"] = cond.memory_mask.bool()
        state = {"h": h, "c": c}
        if cond.first_input is not None:
            _, state = self._advance(cond.first_input, state, static)
        return state, static

    def step(self, tokens: torch.Tensor, state: State, static: State) -> tuple[torch.Tensor, State]:
        """One decoding step: log-probabilities [N, V] of the next word after `tokens` [N], and the new state."""
        return self._advance(self.dropout(self.embed(tokens)), state, static)

    def _advance(self, x: torch.Tensor, state: State, static: State) -> tuple[torch.Tensor, State]:
        h, c = state["h"], state["c"]
        parts = [x]
        if "step_input" in static:
            parts.append(static["step_input"])
        if self.attention == "input":
            context, _ = self.attend(h, static["memory"], static["projected"], static.get("memory_mask"))
            parts.append(context)
        x = torch.cat(parts, 1) if len(parts) > 1 else x
        h_new, c_new = self.lstm(x, (h, c))
        out = h_new
        if self.attention == "output":
            sentinel = None
            if self.use_sentinel:
                sentinel = torch.sigmoid(self.sentinel_x(x) + self.sentinel_h(h)) * torch.tanh(c_new)
            context, _ = self.attend(h_new, static["memory"], static["projected"], static.get("memory_mask"),
                                     sentinel)
            out = context + h_new
        logp = torch.log_softmax(self.word_scores(self.dropout(out)), dim=-1)
        return logp, {"h": h_new, "c": c_new}

    def word_scores(self, out: torch.Tensor) -> torch.Tensor:
        """Scores over the vocabulary [N, V] of output vectors [N, hidden_size]: the output layer, or with
        `tied_output` F^T (P out) + b, F the word embedding (shared with whoever shares `embed`)."""
        if self.output_bias is None:
            return self.output(out)
        return self.output(out) @ self.embed.weight.t() + self.output_bias

    def forward(self, cond: Conditioning, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: log p(tokens[:, t + 1] | tokens[:, :t + 1], image) as [B, L - 1, V]."""
        state, static = self.init_state(cond)
        outputs = []
        for t in range(tokens.size(1) - 1):
            logp, state = self.step(tokens[:, t], state, static)
            outputs.append(logp)
        return torch.stack(outputs, 1)
