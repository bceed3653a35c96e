"""Clean numbers at output: float noise gone, magnitudes and non-floats kept."""

from __future__ import annotations

import json
import math

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
