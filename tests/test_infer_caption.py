"""A trained captioner at work, with tiny random NeuralTalk2 / AdaptiveAttention checkpoints over a features file of
five images: caption_batches keeps the order of ids, beam 1 equals greedy equals a hand-written argmax loop, batches
equal images one at a time; logp_matrix equals each caption scored alone by the model's teacher-forced forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.errors import VLToolsError
from vltools.infer.caption import caption_batches, check_captions, check_features, logp_matrix
from vltools.infer.loader import load_model
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.progress import log
from vltools.models import build_model, schema_version
from vltools.text.vocab import SPECIALS

AA, NT = "adaptive-attention", "neuraltalk2"
WORDS = [*SPECIALS, "a", "red", "blue", "dog", "cube", "on"]
SIZES = {NT: {"img_dim": 16, "embed_size": 8, "hidden_size": 12, "dropout": 0.0},
         AA: {"img_dim": 16, "embed_size": 8, "hidden_size": 12, "attention_size": 6, "dropout": 0.0}}
PREP = {"tokenizer": "karpathy", "min_count": 1, "max_words": 4}
IDS = [f"im{i}" for i in range(5)]
COUNTS = [4, 2, 3, 1, 4]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("caption")
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(5, 4, 16)).astype(np.float32)
    glob = rng.normal(size=(5, 16)).astype(np.float32)
    with FeaturesWriter(folder / "feats.h5", {"backbone": "tiny"}, dtype="float32") as writer:
        writer.add(IDS, regions=regions, num_regions=np.array(COUNTS), **{"global": glob})
    with FeaturesWriter(folder / "regions_only.h5", {"backbone": "tiny"}, dtype="float32") as writer:
        writer.add(IDS, regions=regions)
    with FeaturesWriter(folder / "global_only.h5", {"backbone": "tiny"}, dtype="float32") as writer:
        writer.add(IDS, **{"global": glob})
    checkpoints = {}
    for seed, name in enumerate((NT, AA)):
        torch.manual_seed(seed)
        model = build_model(name, SIZES[name], len(WORDS))
        with torch.no_grad():                       # large random weights: varied captions
            for parameter in model.parameters():
                parameter.add_(0.5 * torch.randn_like(parameter))
        checkpoints[name] = folder / f"{name}.pt"
        save_checkpoint(checkpoints[name], name, SIZES[name], model.state_dict(), vocab=WORDS,
                        train_state={"config": {"task": dict(PREP)}}, schema=schema_version(name))
    return folder, {"regions": regions, "global": glob, "num_regions": np.array(COUNTS)}, checkpoints


def inputs_of(arrays: dict[str, np.ndarray], name: str, rows: list[int]) -> dict[str, torch.Tensor]:
    """The model's input tensors of `rows`, straight from the arrays written (not read back from the file)."""
    if name == NT:
        return {"global": torch.from_numpy(arrays["global"][rows])}
    return {"regions": torch.from_numpy(arrays["regions"][rows]),
            "num_regions": torch.from_numpy(arrays["num_regions"][rows]).long()}


def hand_greedy(model, images: dict[str, torch.Tensor], max_len: int) -> str:
    """Argmax decoding of one image: <pad> and <start> never, only <end> once max_len words are out."""
    state, static = model.init_state(images)
    token, words = torch.tensor([1]), []
    for position in range(max_len + 1):
        logp, state = model.step(token, state, static)
        logp = logp[0].clone()
        if position < max_len:
            logp[[0, 1]] = -float("inf")
        else:
            logp[[i for i in range(len(WORDS)) if i != 2]] = -float("inf")
        word = int(logp.argmax())
        if word == 2:
            break
        words.append(WORDS[word])
        token = torch.tensor([word])
    return " ".join(words)


def run_batches(loaded, features, ids, **options) -> tuple[list[list[str]], list[str]]:
    with FeaturesReader(features) as reader:
        out = list(caption_batches(loaded.model, loaded.vocab, reader, ids, **options))
    return [chunk for chunk, _, _ in out], [text for _, texts, _ in out for text in texts]


@pytest.mark.parametrize("name", [NT, AA])
def test_greedy_and_beam_1_equal_a_hand_argmax_loop_in_the_order_of_ids(world, name):
    folder, arrays, checkpoints = world
    loaded = load_model(checkpoints[name], "captioner")
    order = ["im3", "im0", "im4", "im1", "im2"]
    chunks, greedy = run_batches(loaded, folder / "feats.h5", order, method="greedy", max_len=6, batch_size=2)
    assert chunks == [["im3", "im0"], ["im4", "im1"], ["im2"]]
    _, beam1 = run_batches(loaded, folder / "feats.h5", order, method="beam", beam_size=1, max_len=6, batch_size=3)
    with torch.no_grad():
        direct = [hand_greedy(loaded.model, inputs_of(arrays, name, [IDS.index(i)]), 6) for i in order]
    assert greedy == direct and beam1 == direct
    assert len(set(direct)) > 1 and all(len(text.split()) <= 6 for text in direct)


@pytest.mark.parametrize("name", [NT, AA])
def test_beam_captions_in_batches_equal_one_image_at_a_time(world, name):
    folder, _, checkpoints = world
    loaded = load_model(checkpoints[name], "captioner")
    order = ["im4", "im2", "im0", "im3", "im1", "im2"]       # a repeated id is captioned twice
    chunks, batched = run_batches(loaded, folder / "feats.h5", order, beam_size=3, max_len=5, batch_size=4)
    assert chunks == [order[:4], order[4:]]
    singles = [run_batches(loaded, folder / "feats.h5", [i], beam_size=3, max_len=5)[1][0] for i in order]
    assert batched == singles and batched[1] == batched[5]


def test_sampling_is_fixed_by_the_seed(world):
    folder, _, checkpoints = world
    loaded = load_model(checkpoints[AA], "captioner")
    features = folder / "feats.h5"
    first = run_batches(loaded, features, IDS, method="sample", temperature=3.0, seed=5, max_len=6)[1]
    again = run_batches(loaded, features, IDS, method="sample", temperature=3.0, seed=5, max_len=6)[1]
    others = [run_batches(loaded, features, IDS, method="sample", temperature=3.0, seed=s, max_len=6)[1]
              for s in (6, 7)]
    assert first == again and any(other != first for other in others)


def test_an_unknown_method_is_refused(world):
    folder, _, checkpoints = world
    loaded = load_model(checkpoints[NT], "captioner")
    with pytest.raises(ValueError, match="method must be beam, greedy or sample, not 'topk'"):
        run_batches(loaded, folder / "feats.h5", IDS, method="topk")


@pytest.mark.parametrize(("name", "features", "message"), [
    (NT, "regions_only.h5", r"has no /global dataset; NeuralTalk2 needs a global vector"),
    (AA, "global_only.h5", r"has no /regions dataset; AdaptiveAttention needs spatial features"),
])
def test_features_without_the_model_s_dataset_are_refused_naming_the_file(world, name, features, message):
    folder, _, checkpoints = world
    loaded = load_model(checkpoints[name], "captioner")
    with FeaturesReader(folder / features) as reader:
        with pytest.raises(VLToolsError, match=message) as exc:
            check_features(loaded.model, reader)
    assert str(exc.value).startswith(str(folder / features))


def test_the_fields_read_add_num_regions_when_the_file_has_it(world):
    folder, _, checkpoints = world
    aa, nt = (load_model(checkpoints[n], "captioner") for n in (AA, NT))
    with FeaturesReader(folder / "feats.h5") as reader:
        assert check_features(aa.model, reader) == ["regions", "num_regions"]
        assert check_features(nt.model, reader) == ["global"]
    with FeaturesReader(folder / "regions_only.h5") as reader:
        assert check_features(aa.model, reader) == ["regions"]


def hand_tokens(caption: str) -> list[int]:
    """<start>, the first max_words (4) lower-case words (unknown: <unk>), <end>."""
    return [1, *(WORDS.index(w) if w in WORDS else 3 for w in caption.lower().split()[:4]), 2]


@pytest.mark.parametrize("name", [NT, AA])
@pytest.mark.parametrize(("block_images", "block_captions"), [(2, 2), (1, 1), (25, 100)])
def test_logp_matrix_equals_each_caption_scored_alone_by_teacher_forcing(world, name, block_images, block_captions):
    folder, arrays, checkpoints = world
    loaded = load_model(checkpoints[name], "captioner")
    captions = ["a red dog", "Blue", "zebra dog on a red cube"]
    image_ids = ["im3", "im0", "im4"]
    with FeaturesReader(folder / "feats.h5") as reader:
        logp = logp_matrix(loaded, reader, image_ids, captions, block_images=block_images,
                           block_captions=block_captions, quiet=True)
    assert logp.shape == (3, 3) and logp.dtype == np.float32
    with torch.no_grad():
        for t, caption in enumerate(captions):
            tokens = hand_tokens(caption)
            for j, image_id in enumerate(image_ids):
                out = loaded.model(inputs_of(arrays, name, [IDS.index(image_id)]), torch.tensor([tokens]))[0]
                direct = sum(float(out[s, tokens[s + 1]]) for s in range(len(tokens) - 1))
                assert logp[t, j] == pytest.approx(direct, abs=1e-4)
    assert (logp < 0).all() and len(np.unique(logp)) == 9


def test_all_empty_captions_are_refused_naming_the_model_and_more_than_a_tenth_warned(monkeypatch):
    records = [{"image_id": f"im{i}", "caption": "a red dog"} for i in range(20)]
    with pytest.raises(VLToolsError, match=r"^aa.pt: all 3 captions it wrote are empty \(decoding ended at the "):
        check_captions([{"image_id": i, "caption": text} for i, text in enumerate(["", " ", ""])], "aa.pt")
    with pytest.raises(VLToolsError, match="^l2c.pt: all 1 pair descriptions it wrote are empty"):
        check_captions([{"pair_id": "p", "caption": ""}], "l2c.pt", "pair descriptions")
    warnings: list[str] = []
    monkeypatch.setattr(log, "warning", lambda message, *args: warnings.append(message % args))
    check_captions([{**r, "caption": ""} if n < 2 else r for n, r in enumerate(records)], "aa.pt")
    assert warnings == []                                             # 2 of 20: 10%, not more
    check_captions([{**r, "caption": ""} if n < 3 else r for n, r in enumerate(records)], "aa.pt")
    check_captions([], "aa.pt")
    assert warnings == [
        "3 of the 20 captions (15%) are empty (decoding ended at the first word): the checkpoint may be undertrained, "
        "or the features unlike those it was trained on"]
