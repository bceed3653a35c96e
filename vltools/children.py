"""The processes a stage starts end with it, however it ends (`kill -9` included).

METEOR's Java process (vltools.eval.caption) ends by itself when it reads the end of its standard input, which a
killed stage closes; but it reads nothing while it loads its paraphrase tables (seconds, up to the 2 GB it asks
for), and never sees that end while another process holds the pipe open (a process forked meanwhile). Linux's
parent-death signal ends it at once instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import types
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1     # <linux/prctl.h>: the signal a process receives when the thread that started it ends


def dies_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that has the child killed (SIGKILL) when this process ends, or None where
    there is no parent-death signal (not Linux: the child then ends when it finds its input closed). Linux sends it
    when the starting thread ends: start such a child from a thread that lives as long as it does."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl    # looked up before the fork: the child only calls it
    parent = os.getpid()

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:     # the parent ended between the fork and the call: no signal will come
            os._exit(1)

    return tie


@contextlib.contextmanager
def tied_children(*modules: types.ModuleType) -> Iterator[None]:
    """Within the block, the processes that `modules` start through their own `subprocess` (pycocoevalcap's PTB
    tokenizer and SPICE, which start Java themselves) die with this process (`dies_with_parent`): a killed stage
    left them running. Only those modules' name `subprocess` is replaced, and only for the block."""
    tie = dies_with_parent()
    if tie is None:
        yield
        return
    tied = types.SimpleNamespace(**{**vars(subprocess), "Popen": functools.partial(subprocess.Popen, preexec_fn=tie),
                                    "check_call": functools.partial(subprocess.check_call, preexec_fn=tie)})
    saved = [(module, module.subprocess) for module in modules]
    for module, _ in saved:
        module.subprocess = tied
    try:
        yield
    finally:
        for module, original in saved:
            module.subprocess = original
