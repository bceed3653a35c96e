"""Clean numbers at output: float noise gone, magnitudes and non-floats kept."""

from __future__ import annotations

import json
import math
import re

import numpy as np

from vltools.io.numbers import clean_number, clean_numbers, dumps


def test_float_noise_is_removed():
    assert json.dumps(clean_number(286.79999999999995)) == "286.8"
    assert json.dumps(clean_number(234.60000000000002)) == "234.6"
    assert dumps({"rsum": 100.0 * 0.1 + 276.8}) == '{"rsum": 286.8}'


def test_small_and_large_magnitudes_keep_eight_significant_digits():
    assert clean_number(2e-4) == 0.0002
    assert clean_number(1.2345678912e-7) == 1.2345679e-7
    assert clean_number(123456789.0) == 123456790.0
    assert clean_number(100 / 3) == 33.333333
    assert clean_number(0.123456784999) == 0.12345678


def test_structure_ints_bools_strings_and_non_finite_are_kept():
    value = {"a": [1, True, "x", None, 0.30000000000000004], "b": {"c": np.float32(0.1)}, "n": float("nan")}
    cleaned = clean_numbers(value)
    assert cleaned["a"] == [1, True, "x", None, 0.3]
    assert cleaned["a"][1] is True and isinstance(cleaned["a"][0], int)
    assert cleaned["b"]["c"] == 0.1 and type(cleaned["b"]["c"]) is float
    assert math.isnan(cleaned["n"])
    assert value["a"][4] == 0.30000000000000004  # the input is not modified


def test_score_json_and_the_training_log_print_clean_numbers(tmp_path, vltools_cmd):
    from vltools.eval.retrieval import retrieval_metrics
    from vltools.io.hdf5 import write_arrays
    from vltools.training.state import JsonLog

    # 3 images, 1 caption each: recalls are thirds, whose float sums carry noise (e.g. 33.33...36 + 66.66...67)
    rng = np.random.default_rng(5)
    sims = rng.normal(size=(3, 3))
    direct = retrieval_metrics(sims, np.arange(3))
    noisy = [repr(v) for d in ("i2t", "t2i") for v in direct[d].values() if isinstance(v, float)] + \
        [repr(direct["rsum"])]
    assert any(len(text.replace(".", "").lstrip("0")) > 9 for text in noisy)  # the raw values are noisy
    path = tmp_path / "sims.h5"
    write_arrays(path, "sims", {"sims": sims, "image_ids": ["a", "b", "c"], "caption_ids": ["a0", "b0", "c0"],
                                "caption_image_ids": ["a", "b", "c"]})
    result = vltools_cmd("score", "retrieval", path)
    assert result.returncode == 0, result.stderr.decode()
    printed = result.stdout.decode()
    assert json.loads(printed)["rsum"] == clean_number(direct["rsum"])
    assert json.loads(printed)["i2t"]["R@1"] == clean_number(direct["i2t"]["R@1"])
    for number in re.findall(r"\d+\.\d+", printed):
        assert len(number.replace(".", "").lstrip("0")) <= 8, number
    log = JsonLog(tmp_path / "t.log.jsonl", None, True)
    log.write({"type": "val", "iteration": 3, "rsum": 100 / 3 + 100 / 3 * 2 + 0.1})
    assert (tmp_path / "t.log.jsonl").read_text() == '{"type": "val", "iteration": 3, "rsum": 100.1}\n'
