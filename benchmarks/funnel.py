"""Benchmark of the funnel's end (issue 50, item 3): N = 1, 2, 4, 8 gloo processes under torchrun extract the same
images with a small model (a random ResNet-18 over grid regions, on the CPU), each writing its own part.

Printed per N, beside the CPU, its threads and the load average before and after:
  - the job's wall time;
  - the peak resident memory of the busiest process (each worker's own ru_maxrss, read as it ends);
  - the most bytes any one process received from the others over TCP (each worker's sockets, summed by `ss` as it
    ends: the rendezvous store and any process group it joined);
  - beside them, what the funnel's first process received before this change: the features of the other N - 1
    processes' images, (N - 1) / N of the output's bytes (computed from the parts' sizes: that code is gone).
Target: the measured memory and bytes flat in N (within 10%), where the funnel's grew linearly. One JSON object
on the last line.

    python benchmarks/funnel.py [--images 96] [--processes 1,2,4,8] [--batch-size 4]
    (run by torchrun as: funnel.py --worker REPORTS -- VLTOOLS ARGS)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model, load_average


def worker(reports: Path, args: list[str]) -> None:
    """One torchrun process: run `vltools ARGS`, then report its peak memory and the TCP bytes it received."""
    from vltools.cli import main

    status = 0
    try:
        main(args)
    except SystemExit as exc:
        status = int(exc.code or 0)
    listing = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=False).stdout
    received, owned = 0, False
    for line in listing.splitlines():     # a socket's line names its process; its counters follow, indented
        if not line[:1].isspace():
            owned = f"pid={os.getpid()}," in line
        elif owned and (found := re.search(r"bytes_received:(\d+)", line)):
            received += int(found.group(1))
    rank = os.environ.get("RANK", "0")
    (reports / f"{rank}.json").write_text(json.dumps({
        "rank": int(rank), "status": status, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bytes_received": received}))
    sys.exit(status)


def measure(world: Path, folder: Path, processes: int, batch_size: int) -> dict[str, object]:
    """Run the extraction under torchrun with `processes` processes; what the busiest process held and received."""
    reports = folder / f"reports{processes}"
    reports.mkdir()
    out = folder / f"feats{processes}"
    args = ["-q", "extract-regions", str(world / "images.jsonl"), "--regions", "grid", "--image-size", "64",
            "--backbone", "resnet18", "--weights", "none", "--workers", "0", "--device", "cpu", "--batch-size",
            str(batch_size), "-o", str(out)]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--master-addr",
               "127.0.0.1", "--master-port", str(29500 + processes), str(Path(__file__).resolve()), "--worker",
               str(reports), "--", *args]
    before = load_average()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"N={processes}: torchrun failed: {done.stderr.strip().splitlines()[-1:]}")
    found = [json.loads(path.read_text()) for path in sorted(reports.glob("*.json"))]
    files = [out] if out.is_file() else sorted(out.iterdir())
    output_bytes = sum(path.stat().st_size for path in files)
    return {"processes": processes, "seconds": round(seconds, 2), "parts": len(files),
            "busiest_peak_mib": round(max(item["peak_mib"] for item in found), 1),
            "most_bytes_received": max(item["bytes_received"] for item in found),
            "funnel_first_received_bytes": output_bytes * (processes - 1) // processes,
            "output_bytes": output_bytes, "load_before": before, "load_after": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    given, rest = parser.parse_known_args()
    if given.worker is not None:
        worker(given.worker, [arg for arg in rest if arg != "--"])
        return
    counts = [int(part) for part in given.processes.split(",")]
    print(f"CPU: {cpu_model()}, {os.cpu_count()} threads; each process on 1 thread (OMP_NUM_THREADS=1)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "vltools", "-q", "synth", str(folder / "world"), "--seed", "0",
                        "--images", str(given.images)], check=True)
        results = []
        for processes in counts:
            result = measure(folder / "world", folder, processes, given.batch_size)
            results.append(result)
            print(f"N={processes}: {result['seconds']:.1f} s, {result['parts']} part(s); busiest process peak "
                  f"{result['busiest_peak_mib']:.0f} MiB; most bytes received by one process "
                  f"{result['most_bytes_received']}; the funnel's first process would have received "
                  f"{result['funnel_first_received_bytes']} (of {result['output_bytes']} output bytes); load "
                  f"{result['load_before']} -> {result['load_after']}", flush=True)
    peaks = [item["busiest_peak_mib"] for item in results]
    received = [item["most_bytes_received"] for item in results]
    flat_memory = max(peaks) <= 1.1 * min(peaks)
    flat_bytes = max(received) <= 1.1 * min(received) or max(received) - min(received) < 64 * 1024
    print(f"peak memory {min(peaks):.0f}-{max(peaks):.0f} MiB over N: {'flat' if flat_memory else 'NOT flat'} "
          f"(target within 10%); bytes received {min(received)}-{max(received)}: "
          f"{'flat' if flat_bytes else 'NOT flat'} (target within 10%, or under 64 KiB of rendezvous)")
    print(json.dumps({"images": given.images, "batch_size": given.batch_size, "cpu": cpu_model(),
                      "results": results, "flat_memory": flat_memory, "flat_bytes": flat_bytes}))


if __name__ == "__main__":
    main()
