"""How long decoding a bag into the training cache takes, per bag.

    python benchmarks/decode_speed.py BAG_DIR [--bags 40] [--rounds 3] [--cameras front wrist]

Decodes the first --bags bags under BAG_DIR (each a rosbag2 directory) into an empty
temporary cache, --rounds times, through the path training takes
(arm_act.data.dataset._read_through_cache), and prints the milliseconds per bag of each
round. docs/scaling.md ("Preparing the data") compares the code before and after a change
by running this on each checkout with the same bags.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from arm_act.data.dataset import _read_through_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bag_dir", type=Path)
    parser.add_argument("--bags", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cameras", nargs="+", default=["front", "wrist"], help="the cameras to decode")
    args = parser.parse_args()
    bags = sorted(p for p in args.bag_dir.iterdir() if p.is_dir())[:args.bags]
    if not bags:
        raise SystemExit(f"{args.bag_dir}: no bag directories")
    per_bag_ms = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            started = time.perf_counter()
            for bag in bags:
                _read_through_cache(bag, Path(cache), tuple(args.cameras))
            per_bag_ms.append(round(1000 * (time.perf_counter() - started) / len(bags), 1))
    print(json.dumps({"bags": len(bags), "ms_per_bag": per_bag_ms}))


if __name__ == "__main__":
    main()
