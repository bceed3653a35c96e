"""Evaluation metrics as pure functions: captioning, cross-modal retrieval, semantic retrieval, self-retrieval.

`vltools score` (vltools/commands/score.py) reads files and calls these; trainers call them for validation.
"""
