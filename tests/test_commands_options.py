"""The shared option types: every float option refuses NaN, infinities and values out of range, and every --seed
one no generator accepts, as usage errors (exit 2) naming the option, before any file is read."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from vltools.cli import STAGES, cli, main
from vltools.commands.options import SEED_RANGE, SPLIT, FiniteFloat, Integer
from vltools.infer import checks


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
    # every integer has a range: these once gave an HDF5 TypeError, a MemoryError and gensim's seed error
    ["index", "--seed", "100000000000000000000000", "emb.h5"],
    ["tfidf-proxy", "--dim", "1000000000", "--method", "word2vec-fv", "c.jsonl"],
    ["tfidf-proxy", "--components", "100000", "--method", "word2vec-fv", "c.jsonl"],
    ["tfidf-proxy", "--seed", "-5", "--method", "word2vec-fv", "c.jsonl"],
    ["match", "--nprobe", "100000000000000000000", "q.h5", "--index-file", "i.h5"],
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


def _leaves(command: click.Command, names: tuple[str, ...]):
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _leaves(sub, (*names, name))
    else:
        yield names, command


def test_every_integer_option_takes_its_range_from_the_shared_types():
    """Each integer option is an `Integer` (checks.integer: at most MAX_INTEGER when it names no maximum), and every
    --seed is the one seed range, so that no stage hands a library a value it overflows on."""
    for stage in STAGES:
        for names, command in _leaves(cli.get_command(None, stage), (stage,)):
            for param in command.params:
                where = f"{' '.join(names)} {param.human_readable_name}"
                if isinstance(param.type, click.types.IntParamType):
                    assert isinstance(param.type, Integer), where
                if param.name == "seed":
                    assert param.type is SEED_RANGE, where


def test_huge_numbers_are_refused_in_one_line():
    """Python's ints have no bound, floats do: 10**400 overflowed float() and 10**5000 str()."""
    with pytest.raises(checks.ArgumentError, match="^length_penalty must be a non-negative finite number, not an "
                                                   "integer of about 400 digits$"):
        checks.number(10**400, "length_penalty", 0)
    with pytest.raises(checks.ArgumentError, match="^top_k must be at most 2147483647, not an integer of about "
                                                   "5000 digits$"):
        checks.integer(10**5000, "top_k", 1)
    assert checks.integer(2**31 - 1, "top_k", 1) == 2**31 - 1
    assert checks.integer(2**32 - 1, "seed", 0, checks.MAX_SEED) == 2**32 - 1


@pytest.mark.parametrize("args", [
    ["convert", "webdataset", "--split", "", "shard.tar"],
    ["convert", "coco", "--split", "\x1b[31mtest", "c.json"],
    ["convert", "to-precomp", "--split", "te\nst", "f.h5", "c.jsonl", "out"],
    ["convert", "karpathy", "--only-split", "", "d.json"],
    ["convert", "cub", "--split-list", "\x1b", "list.txt", "text_c10"],
    ["match", "--split", "", "a.h5", "b.jsonl"],
    ["train", "--val-split", "v\ta", "--model", "vse", "f.h5", "c.jsonl", "-o", "m.pt"],
    ["tfidf-proxy", "--train-split", "", "c.jsonl"],
])
def test_split_names_are_refused_when_empty_or_holding_control_characters(tmp_path, monkeypatch, capsys, args):
    """`--split ''` and a split holding ESC were written into records and file names as given."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    option = next(a for a in args if a.startswith("--") and "split" in a)
    assert exit_info.value.code == 2 and f"Invalid value for '{option}'" in err
    assert "must be a split name (a non-empty string of printable characters, without a slash)" in err
    assert "\x1b" not in err
    assert list(tmp_path.iterdir()) == []


def test_every_option_naming_a_split_is_checked_as_one():
    """Each option that names a split (--split, --train-split, --only-split, --split-list's SPLIT, ...) is of the
    SPLIT type, so that no stage writes a split the others refuse."""
    seen = 0
    for stage in STAGES:
        for names, command in _leaves(cli.get_command(None, stage), (stage,)):
            for param in command.params:
                where = f"{' '.join(names)} {param.human_readable_name}"
                if param.name in ("split", "train_split", "val_split", "only_splits", "restval_as"):
                    assert param.type is SPLIT, where
                    seen += 1
                elif param.name == "split_files":
                    assert param.type.types[0] is SPLIT, where
                    seen += 1
    assert seen >= 19
