"""The SCO task: its loss is the sampled hinge plus lambda times the generator's token cross-entropy, computed here
independently; inputs are checked (missing images, swapped files, wrong K)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed

from vltools.errors import VLToolsError
from vltools.io.features import FeaturesWriter
from vltools.losses import sample_negatives
from vltools.training import config_defaults
from vltools.training.tasks.sco import build_task

WORDS = ["red", "blue", "circle", "square", "big", "small"]


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    ids = [f"im{i}" for i in range(12)]
    with FeaturesWriter(tmp_path / "ctx.h5", {"global": "tencrop"}, dtype="float32") as writer:
        writer.add(ids, **{"global": rng.normal(size=(12, 7))})
    with FeaturesWriter(tmp_path / "cnp.h5", {"global": "concepts"}, dtype="float32") as writer:
        writer.add(ids, **{"global": rng.random((12, 5))})
    lines = []
    for n, image_id in enumerate(ids):
        for k in range(2):
            words = " ".join(WORDS[(n + k + j) % 6] for j in range(3))
            lines.append({"image_id": image_id, "caption": f"a {words}", "split": "train" if n < 8 else "val"})
    (tmp_path / "caps.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


def config(**model):
    cfg = config_defaults("sco")
    cfg["model"].update({"embed_size": 8, "word_dim": 6, **model})
    cfg["task"]["vocab_threshold"] = 1
    return cfg


def test_loss_is_hinge_plus_lambda_token_cross_entropy(files):
    torch.manual_seed(0)
    cfg = config(generation=True)
    cfg["task"]["gen_weight"] = 0.5
    task = build_task("sco", [str(files / "ctx.h5"), str(files / "cnp.h5"), str(files / "caps.jsonl")], cfg)
    assert task.model_config["context_dim"] == 7 and task.model_config["concept_dim"] == 5
    batch = task.collate(task.train_data.__getitems__(list(range(16))))
    task.generator = torch.Generator().manual_seed(11)  # the trainer's, reseeded before each loss
    loss = task.loss(task.model, batch)
    model = task.model
    v = model.fuse(batch["context"], batch["concepts"])
    sims = torch.nn.functional.normalize(v) @ torch.nn.functional.normalize(
        model.sentence(batch["tokens"], batch["lengths"])).t()
    same = batch["image_index"][:, None] == batch["image_index"][None, :]
    generator = torch.Generator().manual_seed(11)
    caption_negatives = sample_negatives(same, 128, generator)
    image_negatives = sample_negatives(same.t(), 128, generator).t()
    diagonal = sims.diagonal()
    hinge = ((0.2 - diagonal[:, None] + sims).clamp(min=0)[caption_negatives].sum()
             + (0.2 - diagonal[None, :] + sims).clamp(min=0)[image_negatives].sum())
    # the generator by hand: LSTM cell from h0 = W_h v, c0 = W_c v, teacher-forced, Eq. 3's output
    # softmax(F^T P h_t + b_p) with F the generator's word embedding and P the H -> D projection
    dec = model.generator
    h, c = dec.init_h(v), dec.init_c(v)
    nll = torch.zeros(())
    tokens = batch["tokens"]
    for t in range(tokens.size(1) - 1):
        h, c = dec.lstm(dec.embed(tokens[:, t]), (h, c))
        logp = torch.log_softmax(h @ dec.output.weight.t() @ dec.embed.weight.t() + dec.output_bias, dim=1)
        target = tokens[:, t + 1]
        nll = nll - logp.gather(1, target[:, None]).squeeze(1).masked_fill(target == 0, 0).sum()
    torch.testing.assert_close(loss, hinge + 0.5 * nll, rtol=1e-5, atol=1e-4)


def test_shared_embedding_ties_the_two_word_matrices(files):
    cfg = config(generation=True, shared_embedding=True)
    task = build_task("sco", [str(files / "ctx.h5"), str(files / "cnp.h5"), str(files / "caps.jsonl")], cfg)
    assert task.model.generator.embed is task.model.sentence.embed
    # Eq. 3's output layer is that same F: changing the sentence encoder's embedding changes the word scores
    generator = task.model.generator
    h = torch.randn(2, generator.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = generator.word_scores(h)
        task.model.sentence.embed.weight[5] += 1.0
        after = generator.word_scores(h)
    changed = (after - before).abs().sum(dim=0) > 0
    assert changed[5] and changed.sum() == 1
    assert generator.output.weight.shape == (generator.embed_size, generator.hidden_size)


def test_scheduled_sampling_runs_and_differs_from_teacher_forcing(files):
    torch.manual_seed(0)
    cfg = config(generation=True, sampling=1.0)
    task = build_task("sco", [str(files / "ctx.h5"), str(files / "cnp.h5"), str(files / "caps.jsonl")], cfg)
    batch = task.collate(task.train_data.__getitems__(list(range(8))))
    v = task.model.fuse(batch["context"], batch["concepts"])
    sampled = task.model.generate_logp(v, batch["tokens"])
    task.model.eval()
    forced = task.model.generate_logp(v, batch["tokens"])
    assert sampled.shape == forced.shape
    torch.testing.assert_close(sampled[:, 0], forced[:, 0])      # the first step always sees <start>
    assert not torch.allclose(sampled[:, 2:], forced[:, 2:])


def test_single_side_inputs_and_errors(files):
    captions = str(files / "caps.jsonl")
    task = build_task("sco", [str(files / "ctx.h5"), captions], config(use_concepts=False, generation=False))
    assert task.vectors.paths[1] is None
    with pytest.raises(VLToolsError, match="CONTEXT.h5 CONCEPTS.h5 CAPS.jsonl"):
        build_task("sco", [str(files / "ctx.h5"), captions], config(generation=False))
    with pytest.raises(VLToolsError, match="concept-scores file where context"):
        build_task("sco", [str(files / "cnp.h5"), str(files / "ctx.h5"), captions], config(generation=False))
    with pytest.raises(VLToolsError, match="concept_dim=5 but the config says model.concept_dim=9"):
        build_task("sco", [str(files / "ctx.h5"), str(files / "cnp.h5"), captions], config(concept_dim=9))
    with FeaturesWriter(files / "short.h5", {"global": "tencrop"}, dtype="float32") as writer:
        writer.add(["im0", "im1"], **{"global": np.zeros((2, 7))})
    with pytest.raises(VLToolsError, match="image_id 'im2' has no row in .*short.h5"):
        build_task("sco", [str(files / "short.h5"), str(files / "cnp.h5"), captions], config(generation=False))


def test_same_seed_same_losses_whatever_the_workers(files, tmp_path):
    """SCO's sampled negatives come from the trainer's generator, reseeded from (seed, iteration, share)."""
    cfg = config(generation=True)
    cfg["train"]["batch_size"] = 6
    inputs = [str(files / "ctx.h5"), str(files / "cnp.h5"), str(files / "caps.jsonl")]
    assert_same_losses_for_the_same_seed(lambda c: build_task("sco", inputs, c), cfg, tmp_path)


# ---- "ctx + sen": CONTEXT.h5 GENERATED.jsonl CAPS.jsonl --------------------------------------------------------

def write_generated(files, count: int = 12):
    lines = [{"image_id": f"im{n}", "caption": f"a {WORDS[n % 6]} {WORDS[n // 2 % 6]}"} for n in range(count)]
    (files / "generated.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(files / "generated.jsonl")


def sentence_config(**model):
    return config(use_concepts=False, use_sentence=True, fusion="sum", generation=False, **model)


def test_sentence_task_reads_the_generated_sentences_in_the_concepts_place(files):
    torch.manual_seed(0)
    generated = write_generated(files)
    task = build_task("sco", [str(files / "ctx.h5"), generated, str(files / "caps.jsonl")], sentence_config())
    assert task.vectors.paths == (str(files / "ctx.h5"), None)
    assert task.checkpoint_info()["inputs"]["sentences"] == generated
    batch = task.collate(task.train_data.__getitems__([0, 1, 2, 15]))
    # caption 15 is of image im7, whose generated sentence is "a blue square", read back through the vocabulary
    words = [task.vocab.words[i] for i in batch["sentence_tokens"][3, 1:int(batch["sentence_lengths"][3]) - 1]]
    assert words == ["a", "blue", "square"]
    task.generator = torch.Generator().manual_seed(1)
    loss = task.loss(task.model, batch)
    v = task.model.fuse(batch["context"], batch["concepts"], batch["sentence_tokens"], batch["sentence_lengths"])
    without = task.model.fuse(batch["context"], batch["concepts"], batch["sentence_tokens"][[1, 0, 3, 2]],
                              batch["sentence_lengths"][[1, 0, 3, 2]])
    assert not torch.allclose(v, without)
    loss.backward()
    assert task.model.generated.embed.weight.grad.abs().sum() > 0


def test_sentence_alone_task_represents_each_image_by_its_generated_sentence(files):
    """model.use_context=false: the paper's "ctx + sen"; the context file names the images, its vectors unused."""
    torch.manual_seed(0)
    generated = write_generated(files)
    task = build_task("sco", [str(files / "ctx.h5"), generated, str(files / "caps.jsonl")],
                      sentence_config(use_context=False))
    assert task.checkpoint_info()["config"]["use_context"] is False and task.model.fusion.W_g is None
    batch = task.collate(task.train_data.__getitems__([0, 1, 2, 15]))
    v = task.model.fuse(batch["context"], batch["concepts"], batch["sentence_tokens"], batch["sentence_lengths"])
    other = task.model.fuse(torch.randn_like(batch["context"]), batch["concepts"], batch["sentence_tokens"],
                            batch["sentence_lengths"])
    torch.testing.assert_close(v, other)
    task.generator = torch.Generator().manual_seed(1)
    task.loss(task.model, batch).backward()
    assert task.model.generated.embed.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(("inputs", "model", "message"), [
    (["ctx.h5", "cnp.h5", "caps.jsonl"], {}, "cnp.h5: is HDF5 where the generated sentences"),
    (["ctx.h5", "caps.jsonl"], {}, "use_sentence=true takes CONTEXT.h5 GENERATED.jsonl CAPS.jsonl.*got 2 inputs"),
    (["ctx.h5", "generated.jsonl", "caps.jsonl"], {"use_concepts": True},
     "in the concepts' place: set model.use_concepts=false$"),
])
def test_sentence_task_input_errors(files, inputs, model, message):
    write_generated(files)
    cfg = sentence_config()
    cfg["model"].update(model)
    with pytest.raises(VLToolsError, match=message):
        build_task("sco", [str(files / name) for name in inputs], cfg)


def test_sentence_task_refuses_a_training_image_without_a_generated_sentence(files):
    generated = write_generated(files, count=10)      # im10 and im11 (validation) have none
    with pytest.raises(VLToolsError, match=r"generated.jsonl: has no generated sentence of image_id 'im10' named by "
                                           r".*caps.jsonl \(2 image\(s\) missing\)"):
        build_task("sco", [str(files / "ctx.h5"), generated, str(files / "caps.jsonl")], sentence_config())


def test_trains_in_every_precision(files, tmp_path):
    cfg = config(generation=True)
    cfg["train"]["batch_size"] = 6
    inputs = [str(files / "ctx.h5"), str(files / "cnp.h5"), str(files / "caps.jsonl")]
    assert_trains_in_every_precision(lambda c: build_task("sco", inputs, c), cfg, tmp_path)
