"""One function per stage, with every input the stage takes (output, resume, shard included): it validates its
arguments, locks its outputs once, opens each input and calls infer/ or training/. The click command and the Python
API (vltools.api) both call it, so they cannot differ."""
