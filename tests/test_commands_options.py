"""The shared option types: every float option refuses NaN, infinities and values out of range, and every --seed
one no generator accepts, as usage errors (exit 2) naming the option, before any file is read."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from vltools.cli import main
from vltools.commands.options import SEED_RANGE, FiniteFloat


def test_finite_float_refuses_nan_infinities_and_values_out_of_range():
    @click.command()
    @click.option("--x", type=FiniteFloat(min=0, max=1, max_open=True))
    def show(x: float) -> None:
        click.echo(repr(x))

    assert CliRunner().invoke(show, ["--x", "0.25"]).output == "0.25\n"
    for text in ("nan", "NaN", "inf", "-inf", "-0.5", "1", "1e400", "one"):
        result = CliRunner().invoke(show, ["--x", text])
        assert result.exit_code == 2 and "Invalid value for '--x'" in result.output, (text, result.output)
    assert "must be a finite number from 0 to 1 (excluded), not nan" in CliRunner().invoke(show, ["--x", "nan"]).output
    assert SEED_RANGE.convert("4294967295", None, None) == 2**32 - 1


@pytest.mark.parametrize("args", [
    ["caption", "--sample", "--temperature", "nan", "--model", "m.pt", "f.h5"],
    ["caption", "--sample", "--temperature", "inf", "--model", "m.pt", "f.h5"],
    ["caption", "--length-penalty", "nan", "--model", "m.pt", "f.h5"],
    ["caption", "--seed", "-1", "--model", "m.pt", "f.h5"],
    ["mine-triplets", "--margin", "nan", "proxy.h5"],
    ["baseline", "--seed", "-5", "text-only", "pairs.jsonl"],
    ["train", "--lr", "inf", "--model", "vse", "f.h5", "c.jsonl", "-o", "m.pt"],
    ["train", "--grad-clip", "nan", "--model", "vse", "f.h5", "c.jsonl", "-o", "m.pt"],
    ["train", "--seed", "4294967296", "--model", "vse", "f.h5", "c.jsonl", "-o", "m.pt"],
    ["match", "--image-cache-mb", "nan", "a.h5", "b.jsonl"],
    ["report", "--seed", "-1", "out"],
    ["synth", "--edit-fraction", "nan", "out"],
    ["synth", "--size", "100000", "out"],
    # sizes with a stated maximum: work whose memory grows with them never starts from a slip
    ["caption", "--beam", "1", "--max-len", "1000000", "--model", "m.pt", "f.h5"],
    ["concept-scores", "--crop-size", "100000", "--model", "m.pt", "imgs"],
    ["concept-scores", "--image-size", "100000", "--model", "m.pt", "imgs"],
    ["concept-scores", "--levels", "1,500", "--model", "m.pt", "imgs"],
    ["explain", "--image-size", "100000", "r.jsonl", "m.pt", "i.jsonl", "out"],
    ["extract-regions", "--image-size", "5000", "imgs"],
    ["segment-pool", "--image-size", "5000", "imgs"],
    ["encode", "--image-size", "5000", "--model", "m.pt", "imgs"],
])
def test_non_finite_and_out_of_range_numbers_are_usage_errors(tmp_path, monkeypatch, capsys, args):
    """These once gave tracebacks (the sampler, the seed) or were accepted (a NaN margin or length penalty)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    option = next(a for a in args if a.startswith("--") and a not in ("--sample", "--model", "--beam"))
    assert exit_info.value.code == 2 and f"Invalid value for '{option}'" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
