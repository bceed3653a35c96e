"""One module per stage; each defines `command`, a thin click command over the library."""
