import io
import itertools
import logging
import re
import subprocess
import sys
import types

import pytest

from vltools.io import progress as progress_module
from vltools.io.progress import (
    captured_children,
    configure,
    duration_text,
    labelled,
    log,
    progress,
    progress_text,
    rate_text,
)


@pytest.mark.parametrize(("count", "seconds", "unit", "expected"), [
    (6, 193.0, "steps", "0.031 steps/s = 32 s/step"),     # the tester's run, which read "0.0 steps/s"
    (1, 400.0, "steps", "0.0025 steps/s = 400 s/step"),
    (53, 10.0, "images", "5.3 images/s"),
    (99, 1.0, "captions", "99 captions/s"),
    (1234, 1.0, "images", "1234 images/s"),
    (3_000_000, 2.0, "pairs", "1500000 pairs/s"),
    (0, 5.0, "steps", "0 steps/s"),
    (0, 0.0, "steps", "? steps/s"),
])
def test_rates_keep_two_significant_digits_and_slow_ones_read_per_item(count, seconds, unit, expected):
    assert rate_text(count, seconds, unit) == expected


@pytest.mark.parametrize(("seconds", "expected"), [
    (0.4, "0 s"), (42.0, "42 s"), (59.6, "1 min 00 s"), (185.0, "3 min 05 s"), (3599.0, "59 min 59 s"),
    (7620.0, "2 h 07 min"), (90000.0, "25 h 00 min"),
])
def test_durations_read_as_people_write_them(seconds, expected):
    assert duration_text(seconds) == expected


def test_the_time_left_is_at_the_rate_so_far_and_counts_what_follows_the_loop():
    # 19 steps left at 193/6 s each: 611.2 s; with the next epoch's 25 steps too, 44 steps: 1415.3 s
    assert progress_text(6, 25, "steps", 193.0) == "6/25 steps (0.031 steps/s = 32 s/step, 10 min 11 s left)"
    assert progress_text(6, 25, "steps", 193.0, later=25) == \
        "6/25 steps (0.031 steps/s = 32 s/step, 23 min 35 s left)"
    assert progress_text(40, None, "images", 8.0) == "40 images (5.0 images/s)"
    assert progress_text(0, 10, "images", 0.0) == "0/10 images (? images/s)"


def test_plain_lines_carry_the_count_the_rate_and_the_time_left(capsys, monkeypatch):
    clock = itertools.count(100.0, 32.25)   # the start, then one reading after each step
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    configure(quiet=False, interval=60.0)
    assert list(progress(range(4), total=4, desc="epoch 1/1", unit="steps")) == [0, 1, 2, 3]
    assert capsys.readouterr().err.splitlines() == [
        "vltools: epoch 1/1 2/4 steps (0.031 steps/s = 32 s/step, 1 min 04 s left)",   # 64.5 s after the start
        "vltools: epoch 1/1 4/4 steps (0.031 steps/s = 32 s/step, 0 s left)"]
    configure(quiet=False)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_terminal_bar_shows_the_same_reading(monkeypatch):
    terminal = _Terminal()
    clock = itertools.count(100.0, 32.25)   # tqdm's clock: each reading half a minute later, so it redraws
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr("tqdm.std.time", lambda: next(clock))
    configure(quiet=False)
    assert list(progress(range(3), total=3, desc="caption", unit="captions", status=lambda: "loss 1.5")) == \
        [0, 1, 2]
    shown = terminal.getvalue()
    assert re.search(r"\rcaption: 100%\|[^|]+\| 3/3 captions \(0\.0\d\d?\d? captions/s = \d+ s/caption, 0 s left\), "
                     r"loss 1\.5", shown), shown
    assert re.search(r"\| 1/3 captions \(0\.0\d\d?\d? captions/s = \d+ s/caption, \d+ min \d\d s left\)", shown), shown


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


def test_only_the_first_process_of_a_torchrun_job_reports(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    configure(quiet=False, interval=0.0)
    assert list(progress(range(3), total=3, desc="images")) == [0, 1, 2]
    log.info("wrote 3 images")
    log.warning("skipped 1 image")
    assert capsys.readouterr().err == "vltools: skipped 1 image\n"
    monkeypatch.setenv("RANK", "0")
    configure(quiet=False, interval=0.0)
    assert list(progress(range(3), total=3, desc="images")) == [0, 1, 2]
    log.info("wrote 3 images")
    lines = capsys.readouterr().err.splitlines()
    assert lines[-2].startswith("vltools: images 3/3 it (") and lines[-1] == "vltools: wrote 3 images"
    configure(quiet=False)


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
    assert lines[0].endswith(" left) loss 0.5000") and lines[1].endswith(" left) loss 0.2500")


def test_what_children_write_is_kept_out_and_shown_with_debug_or_on_failure(capfd):
    """pycocoevalcap's Java chatter reached standard output and error (a notebook's output) unless --quiet."""
    command = [sys.executable, "-c", "import sys; print('out chatter'); print('err chatter', file=sys.stderr)"]
    configure()
    with captured_children():
        subprocess.run(command, check=True)
    assert capfd.readouterr() == ("", "")
    configure(debug=True)
    try:
        with captured_children():
            subprocess.run(command, check=True)
    finally:
        configure()
    assert "what the child processes wrote: out chatter\nerr chatter" in capfd.readouterr().err
    with pytest.raises(subprocess.CalledProcessError), captured_children():
        subprocess.run([*command[:2], command[2] + "; sys.exit(3)"], check=True)
    assert "err chatter" in capfd.readouterr().err


def test_log_lines_go_to_the_standard_error_of_the_moment(monkeypatch):
    """The handler is made once per process; a later swap of sys.stderr (an in-process stage, a test's capture)
    must still receive the lines, not the stream the handler first saw."""
    progress_module.configure()
    log = progress_module.log
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    log.warning("one")
    monkeypatch.setattr("sys.stderr", second)
    first.close()
    log.warning("two")
    assert second.getvalue() == "vltools: two\n"
