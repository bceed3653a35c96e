"""vltools.io.scratch: private temporary folders, and those of killed runs removed."""


from test_io_lock import _holder

from vltools.io.scratch import remove_stale_scratch


def test_a_killed_writer_to_stdout_leaves_a_spool_folder_the_next_run_removes(tmp_path):
    with open(tmp_path / "redirected", "wb") as stdout:
        process, spool = _holder(tmp_path, "-", stdout=stdout)
        process.kill()
        process.wait()
    assert spool.parent.name.startswith(f"vltools-{process.pid}-") and spool.exists()
    remove_stale_scratch()
    assert not spool.parent.exists()
