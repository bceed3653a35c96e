"""vltools.io.owners: the process that left a lock or a scratch folder, and whether it still runs."""

import os
import socket
import subprocess
import sys

from vltools.io.owners import alive, is_this_process, start_time, this_process


def test_this_process_is_alive_and_itself():
    me = this_process()
    assert me["pid"] == os.getpid() and me["started"] == start_time(os.getpid()) is not None
    assert alive(me) and is_this_process(me)


def test_a_dead_process_a_reused_pid_and_a_bad_pid_are_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    assert not alive({"pid": child.pid, "host": host})
    assert not alive({"pid": os.getpid(), "host": host, "started": "0"})   # this pid, but not this start
    assert not alive({"pid": -1, "host": host}) and not alive({"host": host})
    assert not is_this_process({"pid": child.pid, "host": host})


def test_a_process_on_another_host_is_assumed_alive():
    assert alive({"pid": 1, "host": f"not-{socket.gethostname()}"})
    assert not is_this_process({"pid": os.getpid(), "host": f"not-{socket.gethostname()}"})
