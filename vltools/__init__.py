"""vltools: composable command-line stages for vision-language research."""

__version__ = "0.1.0"
