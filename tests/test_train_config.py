"""Training configuration: YAML over defaults, --set overrides typed by the defaults, unknown keys refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vltools.errors import VLToolsError
from vltools.training import config_defaults
from vltools.training.config import TRAIN_DEFAULTS, build_config, coerce

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sgraf" / "configs"
DEFAULTS = {"train": {"epochs": 40, "lr": 2e-4, "max_violation": True, "device": "auto"},
            "model": {"embed_size": 1024, "dropout": 0.4, "max_violation": False}}


def test_defaults_are_the_official_sgraf_ones():
    # Paranioar/SGRAF opts.py: batch 128, lr 2e-4, 40 epochs, lr_update 30, grad_clip 2
    assert {k: TRAIN_DEFAULTS[k] for k in ("batch_size", "lr", "epochs", "lr_update", "grad_clip")} == \
        {"batch_size": 128, "lr": 2e-4, "epochs": 40, "lr_update": 30, "grad_clip": 2.0}
    sections = config_defaults("sgr")
    assert sections["task"]["margin"] == 0.2 and sections["task"]["max_violation"] is True
    assert (sections["model"]["embed_size"], sections["model"]["sim_dim"], sections["model"]["sgr_step"]) == \
        (1024, 256, 3)


def test_yaml_then_set_then_options(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 7\n  lr: 1e-3\nmodel:\n  embed_size: 64\n", encoding="utf-8")
    config = build_config(DEFAULTS, path, ["model.embed_size=32", "dropout=0.1", "train.max_violation=no"],
                          {"train.epochs": 9, "train.lr": None})
    assert config["train"] == {"epochs": 9, "lr": 1e-3, "max_violation": False, "device": "auto"}
    assert config["model"] == {"embed_size": 32, "dropout": 0.1, "max_violation": False}
    assert DEFAULTS["train"]["epochs"] == 40  # defaults untouched


def test_values_are_typed_by_the_defaults():
    config = build_config(DEFAULTS, None, ["epochs=12", "lr=3", "device=cuda:1"])
    assert config["train"]["epochs"] == 12 and isinstance(config["train"]["epochs"], int)
    assert config["train"]["lr"] == 3.0 and isinstance(config["train"]["lr"], float)
    assert config["train"]["device"] == "cuda:1"
    assert coerce("TRUE", False, "k", "s") is True
    for text, message in (("epochs=1.5", "epochs must be an integer"), ("lr=fast", "lr must be a number"),
                          ("train.max_violation=maybe", "must be true or false")):
        with pytest.raises(VLToolsError, match=message):
            build_config(DEFAULTS, None, [text])


def test_yaml_types_checked(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: many\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"c.yaml: train.epochs must be an integer, not 'many'"):
        build_config(DEFAULTS, path)
    path.write_text("train:\n  epochs: true\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match="train.epochs must be an integer"):
        build_config(DEFAULTS, path)


@pytest.mark.parametrize("override, message", [
    ("model.embed_sise=3", r"unknown config key 'model.embed_sise'; did you mean 'model.embed_size'"),
    ("learning_rate=3", "unknown config key 'learning_rate'"),
    ("optim.lr=3", "unknown section 'optim'"),
    ("max_violation=true", "in several sections; write one of train.max_violation, model.max_violation"),
    ("epochs", "expected KEY=VALUE"),
    ("epochs=100000000000000000000000", "epochs must be at most 2147483647, not 100000000000000000000000"),
])
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(VLToolsError, match=message):
        build_config(DEFAULTS, None, [override])


def test_a_set_value_out_of_range_is_refused_even_when_an_option_sets_the_key(tmp_path):
    with pytest.raises(VLToolsError, match=r"^--set train.epochs=-1: train.epochs must be in \[1, inf\), not -1$"):
        build_config(DEFAULTS, None, ["train.epochs=-1"], {"train.epochs": 5})
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  lr: -1\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"c.yaml: train.lr must be in \[0.0, inf\), not -1.0$"):
        build_config(DEFAULTS, path, ["train.lr=0.1"])
    with pytest.raises(VLToolsError, match=r"^epochs: train.epochs must be in \[1, inf\), not 0$"):
        build_config(DEFAULTS, None, [], {"train.epochs": 0})     # named as Python spells it (errors.argument)


@pytest.mark.parametrize(("model", "setting", "interval"), [
    ("vse", "task.vocab_threshold=-3", "[0, inf)"), ("sco", "task.negatives=0", "[1, inf)"),
    ("neuraltalk2", "task.nu=0", "(0.0, inf)"), ("neuraltalk2", "task.max_words=0", "[1, inf)"),
    ("l2c", "task.aux_every=0", "[1, inf)"), ("l2c", "task.tv_weight=-1", "[0.0, inf)"),
    ("rmac", "task.whiten_images=0", "[1, inf)"), ("rmac", "task.whiten_eps=-1", "[0.0, inf)"),
])
def test_the_tasks_settings_are_range_checked_by_name(model, setting, interval):
    """task.vocab_threshold=-3 (and the other task settings) were accepted and trained with."""
    key, value = setting.split("=")
    with pytest.raises(VLToolsError, match=rf"^--set {key}={value}: {key} must be in {re.escape(interval)}, not "):
        build_config(config_defaults(model), None, [setting])


def test_bad_yaml_files(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochz: 3\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match="c.yaml: unknown config key 'train.epochz'"):
        build_config(DEFAULTS, path)
    path.write_text("trian:\n  epochs: 3\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match="unknown section 'trian'"):
        build_config(DEFAULTS, path)
    path.write_text("train: [1, 2\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match="c.yaml: line 2: not valid YAML"):
        build_config(DEFAULTS, path)
    with pytest.raises(VLToolsError, match="no such config file"):
        build_config(DEFAULTS, tmp_path / "missing.yaml")


def test_yaml_nested_too_deep_or_malformed_in_a_set_is_one_line(tmp_path):
    """Both were tracebacks: a RecursionError in the YAML parser, and its ParserError for a --set value."""
    path = tmp_path / "c.yaml"
    path.write_text("train: " + "[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"c.yaml: not valid YAML \(nested too deeply\)"):
        build_config(DEFAULTS, path)
    defaults = {"model": {"scales": None}}
    assert build_config(defaults, None, ["scales=[1.0, 0.5]"]) == {"model": {"scales": [1.0, 0.5]}}
    with pytest.raises(VLToolsError, match=r"^--set scales=\[1.0: line 1: not valid YAML"):
        build_config(defaults, None, ["scales=[1.0"])
    with pytest.raises(VLToolsError, match=r"not valid YAML \(nested too deeply\)"):
        build_config(defaults, None, ["scales=" + "[" * 100_000])


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_configs_load(name):
    model = name.split("_")[1].removesuffix(".yaml")
    config = build_config(config_defaults(model), EXAMPLES / name)
    dataset = name.split("_")[0]
    expected = {"f30k_sgr.yaml": (40, 30), "f30k_saf.yaml": (30, 20)}.get(name, (20, 10))
    assert dataset in ("f30k", "coco")
    assert (config["train"]["epochs"], config["train"]["lr_update"]) == expected
    assert (config["train"]["batch_size"], config["train"]["lr"], config["train"]["grad_clip"]) == (128, 2e-4, 2.0)
    # the released training semantics (Paranioar/SGRAF train.py, model.py, data.py, vocab.py)
    assert config["train"]["keep_best"] == "epoch_end"
    assert (config["task"]["negatives"], config["task"]["vocab_splits"], config["task"]["val_captions"]) == \
        ("diagonal", "train+val", 5000)


def test_all_four_example_configs_exist():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == \
        ["coco_saf.yaml", "coco_sgr.yaml", "f30k_saf.yaml", "f30k_sgr.yaml"]
