"""examples/sco/table.py on made-up score files: the "ctx + sen" rows say what represents an image in each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).parent.parent / "examples" / "sco" / "table.py"


def scores(path: Path, r1: float) -> str:
    recalls = {"R@1": r1, "R@5": 50.0, "R@10": 60.0}
    path.write_text(json.dumps({"i2t": recalls, "t2i": recalls, "n_images": 40, "n_captions": 200}))
    return str(path)


def test_the_sentence_rows_name_their_reading(tmp_path):
    rows = [f"ctx={scores(tmp_path / 'ctx.json', 20.0)}", f"ctx_sen={scores(tmp_path / 'sen.json', 10.0)}",
            f"ctx_sen_sum={scores(tmp_path / 'sum.json', 15.0)}"]
    out = subprocess.run([sys.executable, str(TABLE), "title", *rows], capture_output=True, text=True,
                         check=True).stdout
    lines = out.splitlines()
    assert any(line.startswith("ctx + sen ") and "10.0" in line for line in lines), out
    assert any(line.startswith("ctx + sen (sum) ") and "15.0" in line for line in lines), out
    assert "ctx + sen: each image is the generated sentence alone (section 4.2, the paper's reading)" in lines
    assert "ctx + sen (sum): each image is the generated sentence summed with the context (vltools' variant)" in lines


def test_without_a_sentence_row_no_reading_is_noted(tmp_path):
    out = subprocess.run([sys.executable, str(TABLE), "title", f"ctx={scores(tmp_path / 'ctx.json', 20.0)}"],
                         capture_output=True, text=True, check=True).stdout
    assert "each image is" not in out
