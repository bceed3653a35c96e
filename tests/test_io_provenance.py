import sys

from vltools import __version__
from vltools.io.provenance import command_line, ids_digest, provenance


def test_provenance_fields(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/bin/vltools", "inspect", "a file.h5"])
    record = provenance(backbone="resnet18")
    assert record["vltools_version"] == __version__
    assert record["command"] == command_line() == "vltools inspect 'a file.h5'"
    assert record["backbone"] == "resnet18"
    assert record["created"].endswith("+00:00")


def test_python_m_vltools_and_torchrun_are_written_as_the_command(monkeypatch):
    """`python -m vltools` and `torchrun -m vltools` run vltools/__main__.py: the record names the command."""
    monkeypatch.setattr(sys, "argv", ["/site-packages/vltools/__main__.py", "encode", "x.h5"])
    assert command_line() == "vltools encode x.h5"
    monkeypatch.setattr(sys, "argv", ["/elsewhere/__main__.py", "encode"])
    assert command_line() == "__main__.py encode"


def test_ids_digest_depends_on_order_and_content():
    assert ids_digest(["a", "b"]) == ids_digest(["a", "b"])
    assert ids_digest(["a", "b"]) != ids_digest(["b", "a"])
    assert ids_digest(["ab"]) != ids_digest(["a", "b"])
