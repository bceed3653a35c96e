from vltools.io import progress as progress_module
from vltools.io.progress import configure, progress


def test_plain_lines_when_not_a_terminal(capsys, monkeypatch):
    configure(quiet=False, interval=0.0)
    assert list(progress(range(3), total=3, desc="images", unit="img")) == [0, 1, 2]
    err = capsys.readouterr().err
    assert "vltools: images 3/3 img" in err


def test_quiet_prints_nothing(capsys):
    configure(quiet=True)
    assert list(progress(range(3), total=3, desc="images")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    configure(quiet=False)
    assert progress_module._state["quiet"] is False
