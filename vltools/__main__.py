"""`python -m vltools` is the same as the `vltools` command."""

from vltools.cli import main

main()
