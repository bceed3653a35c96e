"""One module per stage; each defines `command`, a thin click command over the library.

A command module imports at its top only what its options show, none of it loading torch; its callback imports
the library it runs, so that every `vltools STAGE --help` answers at once (tests/test_cli.py checks).
"""
