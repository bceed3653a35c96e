"""SCO, semantic concepts and order (Huang et al., CVPR 2018): gated fusion of concept scores and global context,
an LSTM sentence encoder, and (optionally) a generative LSTM fed the fused vector as its initial state.

Image side (Eq. 2): context x (the 10-crop average of a CNN's last layer, l2-normalised as "the normalized
context vector"), concept scores p in [0, 1]^K;
    p^ = l2norm(W_l p),  x^ = l2norm(W_g x),  t = sigmoid(U_l p + U_g x),  v = t * p^ + (1 - t) * x^.
The four maps carry no bias, as Eq. 2 writes them. `fusion="sum"` is Table 1's "cnp + ctx (C)": v = p^ + x^;
with only concepts or only context v is p^ or x^. The matching score is the cosine of v and the sentence vector s,
so `encode_images` returns l2norm(v) and SCO is separable (an index of image vectors serves every caption).

Sentence side (section 3.1): word embedding (D = 300) -> LSTM (H = 1024), the hidden state after the last real
token (`<end>`) is s; captions are cut to `max_words` (J = 50) words before `<start>`/`<end>` are added.

Generation (section 3.3.2, Eq. 3): the captioning core's `LSTMDecoder` (vltools.models.decoder) conditioned by
`init=v` (h0 = W_h v, c0 = W_c v; the paper feeds v into the initial hidden state, the decoder maps it to both
states), teacher-forced on the matched sentence. Its output layer is its word embedding F, q_t = softmax(F^T h_t +
b_p) as Eq. 3 prints it (`tied_output`; h_t (H = 1024) goes through a bias-free projection to D = 300 first, since
F^T h_t needs D-dimensional h_t); `shared_embedding` makes F the sentence encoder's embedding too (Table 1's "(E)";
the other generation rows have a generator F of their own, "non-shared"), `sampling` > 0 feeds the decoder's own
sampled word instead of the ground truth with that probability at each step (scheduled sampling, "(S)").
Generation is a training signal only: matching never runs the decoder.

"ctx + sen" (`use_sentence`, Table 1's "sentence" row): the image is represented by a sentence a captioner
generated for it beforehand (section 4.2: "generate sentences from images and then regard the sentences as the
image representations"; 4.3: "directly using the pre-generated sentences as image representations"), encoded by a
sentence encoder of its own (word embedding and LSTM; Table 1 marks the row "non-shared": its word embedding is
not the query sentences' one). The generated sentence's vector s_g takes the concepts' place in Eq. 2. With
`use_context` false (the paper's reading, the examples' row) the image is the sentence alone, v = l2norm(W_s s_g)
(W_s is the fusion's W_l), as "cnp" is l2norm(W_l p); the context is then only the captioner's input, which is
what Table 1's "10-crop, context" marks. With the context, `fusion="sum"` gives v = l2norm(W_s s_g) + l2norm(W_g x),
a variant vltools keeps (Table 1 marks neither "sum" nor "gate" for the row), and `fusion="gate"` gates s_g and x
as Eq. 2 does. `encode_images` then takes the generated sentence's tokens and lengths after the context and
(empty) concepts.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

FUSIONS = ("gate", "sum")


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """x / ||x||_2 along `dim` (eps keeps an all-zero vector finite)."""
    return x / x.norm(dim=dim, keepdim=True).clamp(min=eps)


class GatedFusion(nn.Module):
    """Eq. 2: v = t * l2norm(W_l p) + (1 - t) * l2norm(W_g x), t = sigmoid(U_l p + U_g x); or the sum / one side.

    `concept_dim` 0 means context only, `context_dim` 0 concepts only. In "ctx + sen" p is the generated
    sentence's vector (`concept_dim` = its size).
    """

    def __init__(self, concept_dim: int, context_dim: int, embed_size: int, fusion: str = "gate") -> None:
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, not {fusion!r}")
        if concept_dim < 1 and context_dim < 1:
            raise ValueError("the image side needs concepts, context or both")
        self.fusion = fusion
        self.W_l = nn.Linear(concept_dim, embed_size, bias=False) if concept_dim else None
        self.W_g = nn.Linear(context_dim, embed_size, bias=False) if context_dim else None
        both = concept_dim > 0 and context_dim > 0 and fusion == "gate"
        self.U_l = nn.Linear(concept_dim, embed_size, bias=False) if both else None
        self.U_g = nn.Linear(context_dim, embed_size, bias=False) if both else None

    def forward(self, concepts: torch.Tensor | None, context: torch.Tensor | None) -> torch.Tensor:
        """v [B, H] from concept scores p [B, K] and the (already normalised) context x [B, I]."""
        p_hat = l2norm(self.W_l(concepts)) if self.W_l is not None else None
        x_hat = l2norm(self.W_g(context)) if self.W_g is not None else None
        if p_hat is None:
            return x_hat
        if x_hat is None:
            return p_hat
        if self.U_l is None:
            return p_hat + x_hat
        gate = torch.sigmoid(self.U_l(concepts) + self.U_g(context))
        return gate * p_hat + (1 - gate) * x_hat


class SentenceEncoder(nn.Module):
    """Word embedding -> one-layer LSTM; the sentence vector is the hidden state at its last real token."""

    def __init__(self, vocab_size: int, word_dim: int, embed_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.lstm = nn.LSTM(word_dim, embed_size, batch_first=True)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu().clamp(min=1), batch_first=True,
                                      enforce_sorted=False)
        # torch's CPU LSTM kernel (oneDNN) has no fp16 form on most CPUs ("could not create a primitive
        # descriptor"): under the CPU's fp16 autocast the LSTM runs in float32, as autocast keeps other ops
        cpu_fp16 = (tokens.device.type == "cpu" and torch.is_autocast_enabled("cpu")
                    and torch.get_autocast_dtype("cpu") == torch.float16)
        with torch.autocast("cpu", enabled=False) if cpu_fp16 else contextlib.nullcontext():
            _, (h, _) = self.lstm(packed)
        return h[-1]


class SCO(nn.Module):
    """Image vector v from concepts and context, sentence vector s, cosine similarity; optional generation head."""

    separable = True
    inputs = "global"   # images are given as (context [B, I], concepts [B, K]) vectors, not region features
    DEFAULTS: dict = {
        "context_dim": 2048, "concept_dim": 256, "use_context": True, "use_concepts": True, "fusion": "gate",
        "embed_size": 1024, "word_dim": 300, "max_words": 50,
        "generation": True, "shared_embedding": False, "sampling": 0.0, "gen_dropout": 0.0,
        "use_sentence": False,
    }

    def __init__(self, vocab_size: int, context_dim: int, concept_dim: int, use_context: bool, use_concepts: bool,
                 fusion: str, embed_size: int, word_dim: int, max_words: int, generation: bool,
                 shared_embedding: bool, sampling: float, gen_dropout: float, use_sentence: bool = False) -> None:
        super().__init__()
        if use_sentence and use_concepts:
            raise ValueError("use_sentence takes the concepts' place: set use_concepts false")
        if not (use_context or use_concepts or use_sentence):
            raise ValueError("SCO needs use_context, use_concepts, use_sentence or two of them")
        if not 0.0 <= sampling <= 1.0:
            raise ValueError(f"sampling is a probability, not {sampling}")
        self.use_context, self.use_concepts = use_context, use_concepts
        self.max_words, self.sampling = max_words, sampling
        first = concept_dim if use_concepts else embed_size if use_sentence else 0
        self.fusion = GatedFusion(first, context_dim if use_context else 0, embed_size, fusion)
        self.sentence = SentenceEncoder(vocab_size, word_dim, embed_size)
        self.generated = SentenceEncoder(vocab_size, word_dim, embed_size) if use_sentence else None
        self.generator = None
        if generation:
            from vltools.models.decoder import LSTMDecoder

            self.generator = LSTMDecoder(vocab_size, embed_size=word_dim, hidden_size=embed_size,
                                         dropout=gen_dropout, init_size=embed_size, tied_output=True)
            if shared_embedding:
                self.generator.embed = self.sentence.embed

    def fuse(self, context: torch.Tensor, concepts: torch.Tensor, sentence_tokens: torch.Tensor | None = None,
             sentence_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The fused image representation v [B, H] (not normalised; the generator starts from it); the generated
        sentence's `<start> ... <end>` tokens [B, L] and lengths [B] are needed with `use_sentence`."""
        x = l2norm(context.float()) if self.use_context else None
        p = concepts.float() if self.use_concepts else None
        if self.generated is not None:
            if sentence_tokens is None or sentence_lengths is None:
                raise ValueError("this SCO model represents images by generated sentences: give their tokens")
            p = self.generated(sentence_tokens, sentence_lengths)
        return self.fusion(p, x)

    def encode_images(self, context: torch.Tensor, concepts: torch.Tensor, sentence_tokens: torch.Tensor | None = None,
                      sentence_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """l2norm(v) [B, H]; an unused side may be an empty [B, 0] tensor."""
        return l2norm(self.fuse(context, concepts, sentence_tokens, sentence_lengths))

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """l2norm(s) [B, H] of `<start> ... <end>` token ids [B, L]."""
        return l2norm(self.sentence(tokens, lengths))

    def similarity(self, img_emb: torch.Tensor, cap_emb: torch.Tensor,
                   cap_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Cosine similarity [Bi, Bc]."""
        return img_emb @ cap_emb.t()

    def generate_logp(self, v: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log p(tokens[:, t + 1] | tokens[:, :t + 1], v) [B, L - 1, V] by the generator; with `sampling` > 0 (in
        training) each step's input is the generator's own sample from the previous step with that probability."""
        from vltools.models.decoder import Conditioning

        cond = Conditioning(init=v)
        if not (self.training and self.sampling > 0):
            return self.generator(cond, tokens)
        state, static = self.generator.init_state(cond)
        previous, outputs = tokens[:, 0], []
        for t in range(tokens.size(1) - 1):
            logp, state = self.generator.step(previous, state, static)
            outputs.append(logp)
            sampled = torch.multinomial(logp.detach().exp(), 1).squeeze(1)
            own = torch.rand(tokens.size(0), device=tokens.device) < self.sampling
            previous = torch.where(own, sampled, tokens[:, t + 1])
        return torch.stack(outputs, 1)

    def forward(self, context: torch.Tensor, concepts: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor,
                sentence_tokens: torch.Tensor | None = None, sentence_lengths: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Training: (scores [B, B] of the batch's images against its captions, the generator's log-probabilities
        of each image's own caption [B, L - 1, V], or None without generation); the generated sentences' tokens
        and lengths with `use_sentence`."""
        v = self.fuse(context, concepts, sentence_tokens, sentence_lengths)
        sims = self.similarity(l2norm(v), self.encode_captions(tokens, lengths))
        return sims, (self.generate_logp(v, tokens) if self.generator is not None else None)
