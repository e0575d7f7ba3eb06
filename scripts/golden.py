"""Golden builds of the pipeline (issue 9): write, check or dump them.

    python scripts/golden.py --check          # compare every golden with tests/golden/hashes.json
    python scripts/golden.py --write          # store the current outputs' sha256 (after an intended change)
    python scripts/golden.py --dump DIR       # write each golden's full output to DIR/<key>.json, to diff

A behaviour change on purpose regenerates the goldens with ``--write`` in a commit of its
own whose message says why (dump before and after and diff the two folders to see what
changed). The inputs and configurations are listed in ``tests/goldens.py``; data-set goldens
need ``../shared/data`` (without it, ``--write`` keeps their stored hashes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import goldens  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="compare with tests/golden/hashes.json")
    group.add_argument("--write", action="store_true", help="store the current outputs' hashes")
    group.add_argument("--dump", type=Path, metavar="DIR", help="write each full output to DIR/<key>.json")
    parser.add_argument("--only", default="", help="only keys containing this text")
    args = parser.parse_args(argv)
    keys = [k for k in goldens.golden_keys(with_data=True) if args.only in k]
    start = time.perf_counter()
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for key in keys:
            data = json.loads(goldens.run(key).output)
            name = key.replace("/", "_").replace("|", "__") + ".json"
            (args.dump / name).write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {len(keys)} outputs to {args.dump} in {time.perf_counter() - start:.1f} s")
        return 0
    stored = goldens.load_hashes() if goldens.HASHES.is_file() else {}
    if args.write:
        hashes = dict(stored) if args.only else {k: v for k, v in stored.items() if not k.startswith(("fixture/", "case/"))}
        if goldens.shared_data() is not None and not args.only:
            hashes = {k: v for k, v in hashes.items() if not k.startswith(("swe/", "tau/"))}
        for key in keys:
            hashes[key] = goldens.run(key).digest
        goldens.HASHES.parent.mkdir(parents=True, exist_ok=True)
        goldens.HASHES.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(keys)} goldens to {goldens.HASHES} in {time.perf_counter() - start:.1f} s")
        return 0
    bad = [k for k in keys if stored.get(k) != goldens.run(k).digest]
    for key in bad:
        print(f"differs: {key}" if key in stored else f"not stored: {key}")
    print(f"{len(keys) - len(bad)} of {len(keys)} goldens equal in {time.perf_counter() - start:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
