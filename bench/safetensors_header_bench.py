"""Time to read a safetensors header of N one-element tensors (issue 34, item 4).

Writes a file per N with the tensors in a random name order, times `specdec.read_safetensors`
(the C++ reader, as `specdec inspect` and `LLM` use it) in a child process with a deadline, and
writes the times as JSON. A reader linear in the header takes time proportional to N; the reader
before issue 34 (nlohmann's parse with a callback) grew with N^2.

    python3 bench/safetensors_header_bench.py --sizes 10000 20000 40000 300000 \
        --out bench/results/safetensors_header.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

from specdec._files import check_output_file, write_file_atomic


def write_header_file(path: Path, n: int, seed: int = 0) -> int:
    """A valid safetensors file of `n` F32 tensors of shape [1]; returns its header's bytes."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    parts = ['"__metadata__":{"format":"pt"}']
    for pos, i in enumerate(order):
        parts.append(f'"layers.{i}.weight":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * pos},{4 * pos + 4}]}}')
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * (-len(header) % 8)
    write_file_atomic(path, struct.pack("<Q", len(header)) + header + bytes(4 * n), None)
    return len(header)


_CHILD = ("import sys, time, specdec; t = time.perf_counter(); f = specdec.read_safetensors(sys.argv[1]); "
          "print(len(f['tensors']), time.perf_counter() - t)")


def time_read(path: Path, deadline_s: float) -> dict:
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                             timeout=deadline_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "deadline_s": deadline_s}
    if out.returncode != 0:
        return {"status": "error", "error": out.stderr.strip().splitlines()[-1:]}
    count, seconds = out.stdout.split()
    return {"status": "ok", "num_tensors": int(count), "read_s": float(seconds),
            "wall_s": time.perf_counter() - start}


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10000, 20000, 40000, 300000])
    p.add_argument("--deadline", type=float, default=120.0, help="seconds per read before giving up")
    p.add_argument("--out", type=Path, default=None, help="JSON results (default: print only)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"h{n}.safetensors"
            header_bytes = write_header_file(path, n)
            row = {"num_entries": n, "header_bytes": header_bytes, **time_read(path, args.deadline)}
            print(json.dumps(row), flush=True)
            rows.append(row)
            os.unlink(path)
    if args.out:
        check_output_file(args.out, "--out", create_folder=True)
        write_file_atomic(args.out, json.dumps({"bench": "safetensors_header", "python": sys.executable,
                                                "rows": rows}, indent=1) + "\n", "--out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
