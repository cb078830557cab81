"""Expand [[family, config], ...] (configs without `unroll`/`min_blocks`) into every feasible
combination of those two parameters, as JSON for `ladder.py --configs`.

    python studies/variants.py BASE.json > CONFIGS.json
"""

from __future__ import annotations

import json
import sys

from autotune.space import device_limits, infeasibility


def main() -> None:
    listed = []
    for family, base in json.load(open(sys.argv[1])):
        for unroll in (False, True):
            for min_blocks in (1, 2):
                config = {**base, "unroll": unroll, "min_blocks": min_blocks}
                if infeasibility(family, config, "float32", device_limits()) is None:
                    listed.append([family, config])
    json.dump(listed, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
