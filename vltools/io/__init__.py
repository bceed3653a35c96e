"""Files in and out: features HDF5, JSONL records, checkpoints, atomic and stdout-safe writes, progress."""
