"""Expand [[family, config], ...] into every feasible combination of the named parameters' values
(each over its family's SPACE), as JSON for `ladder.py --configs`. A parameter a base config
lacks and no axis names takes the family's DEFAULT value.

    python studies/variants.py BASE.json unroll min_blocks > CONFIGS.json
"""

from __future__ import annotations

import itertools
import json
import sys

import kernels
from autotune.space.configs import device_limits, infeasibility


def expand(bases: list, axes: list[str]) -> list:
    listed = []
    for family, base in bases:
        module = kernels.family(family)
        for values in itertools.product(*(module.space[axis] for axis in axes)):
            config = {**module.default, **base, **dict(zip(axes, values))}
            if infeasibility(family, config, "float32", device_limits()) is None and [family, config] not in listed:
                listed.append([family, config])
    return listed


def main() -> None:
    json.dump(expand(json.load(open(sys.argv[1])), sys.argv[2:]), sys.stdout, indent=1)


if __name__ == "__main__":
    main()
