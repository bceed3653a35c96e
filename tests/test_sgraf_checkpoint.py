"""Import of a checkpoint in the layout the released SGRAF code saves (built here from its key names)."""

from __future__ import annotations

import argparse

import pytest
import torch
from click.testing import CliRunner
from conftest import DATA, run_vltools

from vltools.cli import cli
from vltools.data.converters.sgraf_checkpoint import import_sgraf_checkpoint
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.models import build_model, model_from_checkpoint
from vltools.text.vocab import Vocabulary

VOCAB_JSON = DATA / "convert" / "scan_vocab" / "f30k_precomp_vocab.json"   # 8481 words
V, W, E, S, K, D = 8481, 8, 32, 16, 6, 12


def official_keys(module_name: str, sgr_step: int = 2) -> list[list[tuple[str, tuple]]]:
    """(key, shape) of the three state dicts, as the released model.py names them (bi-GRU, 1 layer)."""
    img = [("fc.weight", (E, D)), ("fc.bias", (E,))]
    txt = [("embed.weight", (V, W))]
    for suffix in ("", "_reverse"):
        txt += [(f"cap_rnn.weight_ih_l0{suffix}", (3 * E, W)), (f"cap_rnn.weight_hh_l0{suffix}", (3 * E, E)),
                (f"cap_rnn.bias_ih_l0{suffix}", (3 * E,)), (f"cap_rnn.bias_hh_l0{suffix}", (3 * E,))]

    def bn(prefix, n):
        return [(f"{prefix}.weight", (n,)), (f"{prefix}.bias", (n,)), (f"{prefix}.running_mean", (n,)),
                (f"{prefix}.running_var", (n,)), (f"{prefix}.num_batches_tracked", ())]

    sim = [("v_global_w.embedding_local.0.weight", (E, E)), ("v_global_w.embedding_local.0.bias", (E,)),
           *bn("v_global_w.embedding_local.1", K),
           ("v_global_w.embedding_global.0.weight", (E, E)), ("v_global_w.embedding_global.0.bias", (E,)),
           *bn("v_global_w.embedding_global.1", E),
           ("v_global_w.embedding_common.0.weight", (1, E)), ("v_global_w.embedding_common.0.bias", (1,)),
           ("t_global_w.embedding_local.0.weight", (E, E)), ("t_global_w.embedding_local.0.bias", (E,)),
           ("t_global_w.embedding_global.0.weight", (E, E)), ("t_global_w.embedding_global.0.bias", (E,)),
           ("t_global_w.embedding_common.0.weight", (1, E)), ("t_global_w.embedding_common.0.bias", (1,)),
           ("sim_tranloc_w.weight", (S, E)), ("sim_tranloc_w.bias", (S,)),
           ("sim_tranglo_w.weight", (S, E)), ("sim_tranglo_w.bias", (S,)),
           ("sim_eval_w.weight", (1, S)), ("sim_eval_w.bias", (1,))]
    if module_name == "SGR":
        for i in range(sgr_step):
            for layer in ("graph_query_w", "graph_key_w", "sim_graph_w"):
                sim += [(f"SGR_module.{i}.{layer}.weight", (S, S)), (f"SGR_module.{i}.{layer}.bias", (S,))]
    else:
        sim += [("SAF_module.attn_sim_w.weight", (1, S)), ("SAF_module.attn_sim_w.bias", (1,)),
                *bn("SAF_module.bn", 1)]
    return [img, txt, sim]


def random_state(keys: list[tuple[str, tuple]], gen: torch.Generator) -> dict:
    state = {}
    for key, shape in keys:
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(1234)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=gen) + 0.5
        else:
            state[key] = torch.randn(shape, generator=gen) * 0.3
    return state


def official_opt(module_name: str) -> argparse.Namespace:
    return argparse.Namespace(data_path="/data", data_name="f30k_precomp", vocab_path="./vocab/",
                              model_name="./runs/checkpoint", logger_name="./runs/log", batch_size=128,
                              num_epochs=40, lr_update=30, learning_rate=0.0002, workers=10, log_step=10,
                              val_step=1000, grad_clip=2.0, margin=0.2, max_violation=True, img_dim=D, word_dim=W,
                              embed_size=E, sim_dim=S, num_layers=1, bi_gru=True, no_imgnorm=False,
                              no_txtnorm=False, module_name=module_name, sgr_step=2, vocab_size=V)


def write_released(folder, module_name: str):
    """A checkpoint saved the way the released train.py saves one."""
    gen = torch.Generator().manual_seed(0)
    parts = [random_state(keys, gen) for keys in official_keys(module_name)]
    path = folder / "model_best.pth.tar"
    torch.save({"epoch": 17, "model": parts, "best_rsum": 480.5, "opt": official_opt(module_name),
                "Eiters": 5000}, path)
    return module_name, parts, path


@pytest.fixture(params=["SGR", "SAF"])
def released(request, tmp_path):
    return write_released(tmp_path, request.param)


def inputs():
    gen = torch.Generator().manual_seed(2)
    regions = torch.randn(3, K, D, generator=gen)
    lengths = torch.tensor([5, 8, 3, 6])
    tokens = torch.randint(4, V, (4, 8), generator=gen) * (torch.arange(8) < lengths[:, None])
    return regions, tokens, lengths


def scores(model, regions, tokens, lengths):
    with torch.no_grad():
        return model.similarity(model.encode_images(regions), model.encode_captions(tokens, lengths), lengths)


def test_import_needs_trust(released):
    _, _, path = released
    with pytest.raises(VLToolsError, match="pass trust=True if you trust"):
        import_sgraf_checkpoint(path, VOCAB_JSON, trust=False)
    with pytest.raises(VLToolsError, match="pickle"):
        load_checkpoint(path)


def test_imported_model_gives_the_same_similarities(released, tmp_path):
    module_name, parts, path = released
    payload = import_sgraf_checkpoint(path, VOCAB_JSON, trust=True)
    assert payload["model"] == module_name.lower() and len(payload["vocab"]) == V
    assert payload["config"]["num_regions"] == K and payload["config"]["embed_size"] == E
    assert payload["train_state"] == {"epoch": 17, "iteration": 5000, "best_rsum": 480.5,
                                      "inputs": {"feature_extractor": "bottom-up"}}  # match checks the features
    out = tmp_path / "model.pt"
    save_checkpoint(out, **payload)
    converted = model_from_checkpoint(load_checkpoint(out))

    direct = build_model(module_name.lower(), {"img_dim": D, "word_dim": W, "embed_size": E, "sim_dim": S,
                                               "num_regions": K, **({"sgr_step": 2} if module_name == "SGR" else {})},
                         V)
    for prefix, part in zip(("img_enc", "txt_enc", "sim_enc"), parts, strict=True):
        getattr(direct, prefix).load_state_dict(part)
    direct.eval()
    for key, tensor in [(f"{p}.{k}", t) for p, part in zip(("img_enc", "txt_enc", "sim_enc"), parts, strict=True)
                        for k, t in part.items()]:
        assert torch.equal(converted.state_dict()[key], tensor), key
    expected = scores(direct, *inputs())
    assert torch.equal(scores(converted, *inputs()), expected)
    assert expected.std() > 0


def test_vocabulary_size_must_match(released, tmp_path):
    _, _, path = released
    small = Vocabulary(["<pad>", "<start>", "<end>", "<unk>", "a"])
    with pytest.raises(VLToolsError, match="8481 rows but the vocabulary has 5 words"):
        import_sgraf_checkpoint(path, small, trust=True)


def test_not_a_released_checkpoint(tmp_path):
    path = tmp_path / "other.pth"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(VLToolsError, match="not a released SGRAF checkpoint"):
        import_sgraf_checkpoint(path, VOCAB_JSON, trust=True)
    with pytest.raises(VLToolsError, match="no such checkpoint"):
        import_sgraf_checkpoint(tmp_path / "missing.pth", VOCAB_JSON, trust=True)


def test_cli(tmp_path):
    _, _, path = write_released(tmp_path, "SGR")
    out = tmp_path / "model.pt"
    refused = run_vltools("convert", "sgraf-checkpoint", path, "--vocab", VOCAB_JSON, "-o", out)
    assert refused.returncode == 1 and not out.exists()
    assert refused.stderr.decode().count("\n") == 1 and "pass --trust" in refused.stderr.decode()
    done = CliRunner().invoke(cli, ["convert", "sgraf-checkpoint", str(path), "--vocab", str(VOCAB_JSON),
                                    "--trust", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert load_checkpoint(out)["model"] in ("sgr", "saf")
