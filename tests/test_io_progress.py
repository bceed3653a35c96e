import logging
import subprocess
import sys

from vltools.io import progress as progress_module
from vltools.io.progress import configure, labelled, log, progress, quiet_children


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


def _formatted(message: str) -> str:
    """How the vltools handler writes an info line now (whatever stream it was given)."""
    handler = log.handlers[0]
    record = log.makeRecord("vltools", logging.INFO, __file__, 0, message, (), None)
    assert handler.filter(record)
    return handler.format(record)


def test_items_count_in_the_users_unit_with_a_status_and_a_label(capsys):
    """Batches counted by their images; the status (a training's loss) ends the line; under `labelled` both the
    progress lines and the log lines name the run."""
    configure(quiet=False, interval=0.0)
    batches = [["a", "b", "c"], ["d", "e"]]
    losses = iter([0.5, 0.25])
    with labelled("sgr f30k_sgr.pt"):
        assert list(progress(batches, total=5, desc="epoch 1/2", unit="images", size=len,
                             status=lambda: f"loss {next(losses):.4f}")) == batches
        assert _formatted("validation at iteration 2") == "vltools: sgr f30k_sgr.pt: validation at iteration 2"
    assert _formatted("after") == "vltools: after"
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["vltools: sgr f30k_sgr.pt: epoch 1/2 3/5 images",
                                                       "vltools: sgr f30k_sgr.pt: epoch 1/2 5/5 images"]
    assert lines[0].endswith("images/s) loss 0.5000") and lines[1].endswith("images/s) loss 0.2500")


def test_quiet_children_silences_a_child_process_only_under_quiet(capfd):
    command = [sys.executable, "-c", "import sys; print('chatter', file=sys.stderr)"]
    configure(quiet=True)
    with quiet_children():
        subprocess.run(command, check=True)
    assert capfd.readouterr().err == ""
    configure(quiet=False)
    with quiet_children():
        subprocess.run(command, check=True)
    assert capfd.readouterr().err == "chatter\n"
