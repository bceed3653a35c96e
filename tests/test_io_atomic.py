import subprocess
import sys

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.atomic import atomic_path, binary_output, text_output
from vltools.io.features import FeaturesReader

WRITE_FEATURES_TO_STDOUT = """
import numpy as np
from vltools.io.atomic import binary_output
from vltools.io.features import FeaturesWriter
with binary_output(None) as tmp, FeaturesWriter(tmp, {"backbone": "test"}, dtype="float32") as writer:
    writer.add(["a", "b"], regions=np.arange(24, dtype=np.float32).reshape(2, 3, 4))
"""


def test_atomic_path_renames_on_success_and_cleans_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("done")
        assert not target.exists()
    assert target.read_text() == "done"
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "bad.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_folder_is_a_user_error(tmp_path):
    with pytest.raises(VLToolsError, match="does not exist"), atomic_path(tmp_path / "no" / "x.h5"):
        pass


def test_text_output_to_file(tmp_path):
    with text_output(tmp_path / "t.jsonl") as stream:
        stream.write("x\n")
    assert (tmp_path / "t.jsonl").read_text() == "x\n"


@pytest.mark.parametrize("shell", ["{py} > {out}", "{py} | cat > {out}"])
def test_hdf5_to_stdout_redirect_and_pipe_read_back_identically(tmp_path, shell):
    script = tmp_path / "w.py"
    script.write_text(WRITE_FEATURES_TO_STDOUT)
    out = tmp_path / "f.h5"
    subprocess.run(shell.format(py=f"{sys.executable} {script}", out=out), shell=True, check=True)
    with FeaturesReader(out) as reader:
        assert reader.ids == ["a", "b"]
        np.testing.assert_array_equal(reader.read(["b"])["regions"][0], np.arange(12, 24).reshape(3, 4))


def test_hdf5_to_a_terminal_is_refused(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with pytest.raises(VLToolsError, match="refusing to write HDF5 to a terminal"), binary_output(None):
        pass


