"""Importers and exporters for the field's formats, one module per format family.

Each module holds pure library functions over paths and streams that return records (captions,
regions, pairs) or arrays; `vltools convert` (vltools/commands/convert.py) only wires them to files.
"""
