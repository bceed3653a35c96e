"""vltools.children: a process started with `dies_with_parent()` carries Linux's parent-death signal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vltools.children import dies_with_parent, tied_children

# the child reads its own parent-death signal back: prctl(PR_GET_PDEATHSIG, &signal)
READ_BACK = "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_started_with_it_is_killed_when_its_parent_ends():
    def child_signal(**popen: object) -> str:
        return subprocess.run([sys.executable, "-c", READ_BACK], capture_output=True, text=True, check=True,
                              **popen).stdout.strip()

    assert child_signal(preexec_fn=dies_with_parent()) == "9"    # SIGKILL
    assert child_signal() == "0"                                 # none without it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_pycocoevalcap_s_tokenizer_and_spice_start_their_java_tied_within_the_block():
    """PTBTokenizer (Popen) and SPICE (check_call) start Java themselves, and a killed stage left it running."""
    from pycocoevalcap.spice import spice
    from pycocoevalcap.tokenizer import ptbtokenizer

    def started(module: object) -> tuple[str, int]:
        process = module.subprocess.Popen([sys.executable, "-c", READ_BACK], stdout=subprocess.PIPE, text=True)
        try:
            module.subprocess.check_call([sys.executable, "-c", READ_BACK.replace("print(s.value)",
                                                                                  "raise SystemExit(s.value)")])
        except subprocess.CalledProcessError as exc:
            return process.communicate()[0].strip(), exc.returncode
        return process.communicate()[0].strip(), 0

    with tied_children(ptbtokenizer, spice):
        assert started(ptbtokenizer) == started(spice) == ("9", 9)
    assert started(ptbtokenizer) == started(spice) == ("0", 0)
    assert ptbtokenizer.subprocess is spice.subprocess is subprocess
