"""Datasets and the field's file formats: `converters` imports and exports them as vltools files."""
