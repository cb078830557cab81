"""Configs for shapes nobody tuned, chosen from measurements at the nearest measured shapes.

A measured table (shipped per GPU model as autotune/data/measured/<gpu>.json, made by
studies/table.py, which builds it from the step 25 to 32 studies (docs/performance.md)) holds,
for each of many training shapes, the speed of every candidate, all timed through the call path on
one GPU. A candidate is a tile (of the shipped records, of the shape rule, or a skinny variant)
and a policy: at a shape, the tile is fitted to it (autotune.space.guesses.fit_tile: a side longer than
the product's shrinks) and K is split as the policy's wave arithmetic says there
(autotune.space.guesses.SPLIT_POLICIES), which may be not at all, or (policy "stream") all the tiles'
k-steps are shared out among STREAM_WORKERS blocks per SM (kernels.streamk). For a shape asked,
its NEIGHBOURS nearest training shapes (autotune.store.rows.shape_distance) vote: a candidate scores
the mean, weighted by 1 / (1 + distance), of the log of its speed over
the best speed at each neighbour, and the best score wins, fitted and split for the shape asked.
Measured speeds transfer better than a tuned row's lone config or the cost model's prices
(`leave_one_out` measures it on the table itself; docs/performance.md, steps 23 and 24).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from autotune.space.guesses import SPLIT_POLICIES, STREAM_WORKERS, TILE_SCHEDULES, fit_tile, policy_splits
from autotune.store.rows import shape_distance
from kernels.rules import adds_into_c

NEIGHBOURS = 8
#: a candidate not measured at a neighbour (its tile was not tried there) counts as this share
#: of that neighbour's best
UNMEASURED = 0.3
STREAM = "stream"
POLICIES = (*SPLIT_POLICIES, STREAM)


@dataclass(frozen=True)
class Pick:
    family: str
    config: dict
    name: str  # the candidate: "<tile index>:<policy>"
    basis: str  # the neighbours it was measured at and how it fared there


def candidate_name(tile_index: int, policy: str) -> str:
    return f"{tile_index}:{policy}"


def config_for(tile: dict, policy: str, shape: tuple[int, int, int], sm_count: int) -> tuple[str, dict]:
    """The (family, params) of a candidate at `shape` (M, N, K): its tile (the shape rules' family's,
    autotune.space.guesses.TILE_SCHEDULES) fitted to the shape, K split as its policy asks there,
    which may be not at all, or streamed."""
    m, n, k = shape
    fitted = fit_tile(tile, m, n, k)
    if policy == STREAM:
        return TILE_SCHEDULES.config(fitted, workers_per_sm=STREAM_WORKERS)
    return TILE_SCHEDULES.config(fitted, policy_splits(policy, shape, fitted, sm_count))


def choose(table: dict, shape: tuple[int, int, int], sm_count: int, deterministic: bool = False,
           feasible=lambda family, params: True) -> Pick | None:
    """The candidate of `table` its NEIGHBOURS nearest shapes rate best for `shape`; with
    `deterministic`, only candidates that leave K whole there and do not stream. None for an empty
    table."""
    found = ranked(table, shape, sm_count, deterministic, feasible, count=1)
    return found[0] if found else None


def ranked(table: dict, shape: tuple[int, int, int], sm_count: int, deterministic: bool = False,
           feasible=lambda family, params: True, count: int | None = None) -> list[Pick]:
    """The candidates as `choose` rates them for `shape`, best first, each config once; `count`
    of them at most."""
    shapes = table["shapes"]
    if not shapes:
        return []
    near = sorted(shapes, key=lambda s: (shape_distance(shape, (s["m"], s["n"], s["k"])), s["m"], s["n"], s["k"]))
    near = near[:NEIGHBOURS]
    weights = [1 / (1 + shape_distance(shape, (s["m"], s["n"], s["k"]))) for s in near]
    scored = []
    for name in sorted({name for s in near for name in s["gflops"]}):
        index, policy = name.split(":")
        family, params = config_for(table["tiles"][int(index)], policy, shape, sm_count)
        if (deterministic and adds_into_c(params)) or not feasible(family, params):
            continue
        score = sum(w * math.log(_speed(s, name) / max(s["gflops"].values())) for w, s in zip(weights, near))
        scored.append((score / sum(weights), name, family, params))
    picks, seen = [], []
    for score, name, family, params in sorted(scored, key=lambda entry: (entry[0], entry[1]), reverse=True):
        if (family, params) in seen:
            continue
        seen.append((family, params))
        fared = ", ".join(f"{s['m']}x{s['n']}x{s['k']} {_speed(s, name) / max(s['gflops'].values()):.2f}" for s in near)
        split = (f", K split {params['splits']} ways" if params.get("splits", 1) > 1 else
                 f", stream-K on {params['workers_per_sm']} blocks per SM" if family == TILE_SCHEDULES.stream else "")
        basis = (f"measured: tile {index_of(name)} of {table['device']}'s table{split}; at the {len(near)} nearest of "
                 f"{len(shapes)} measured shapes it ran at {fared} of the best")
        picks.append(Pick(family, params, name, basis))
        if count is not None and len(picks) == count:
            break
    return picks


def index_of(name: str) -> int:
    return int(name.split(":")[0])


def _speed(shape: dict, name: str) -> float:
    """A candidate's GFLOPS at a measured shape, or UNMEASURED of the best there."""
    return shape["gflops"].get(name) or UNMEASURED * max(shape["gflops"].values())


def leave_one_out(table: dict, sm_count: int) -> list[dict]:
    """For each measured shape: the candidate chosen from the other shapes, and its speed there
    relative to the best candidate and to cuBLAS."""
    found = []
    for index, shape in enumerate(table["shapes"]):
        others = {**table, "shapes": table["shapes"][:index] + table["shapes"][index + 1:]}
        pick = choose(others, (shape["m"], shape["n"], shape["k"]), sm_count)
        speed = _speed(shape, pick.name)
        best = max(shape["gflops"].values())
        found.append({"m": shape["m"], "n": shape["n"], "k": shape["k"], "pick": pick.name, "of_best": speed / best,
                      "vs_cublas": speed / shape["cublas_gflops"] if shape.get("cublas_gflops") else None})
    return found


def table_of(measured: dict, cc: str, sm_count: int) -> dict:
    """A table as studies/table.py builds it: its candidate tiles, and per shape the
    speed of every candidate (the speed of the config it came to there) that ran."""
    shapes = []
    for entry in measured["shapes"]:
        speeds = {}
        for job in entry["jobs"]:
            if job.get("gflops"):
                for name in job.get("candidates", ()):
                    speeds[name] = round(job["gflops"], 1)
        if speeds:
            m, n, k = entry["shape"]
            shapes.append({"m": m, "n": n, "k": k, "cublas_gflops": round(entry.get("cublas_gflops") or 0, 1),
                           "gflops": speeds})
    return {"device": measured["device"], "cc": cc, "sm_count": sm_count, "dtype": "float32", "layout": "NN",
            "kernels": measured.get("kernels", {}), "tiles": measured["tiles"], "shapes": shapes}


def dumps(table: dict) -> str:
    """The table as shipped: one line per tile and per shape."""
    tiles = ",\n  ".join(json.dumps(t, sort_keys=True) for t in table["tiles"])
    shapes = ",\n  ".join(json.dumps(s, sort_keys=True) for s in table["shapes"])
    head = {k: v for k, v in table.items() if k not in ("tiles", "shapes")}
    return json.dumps(head, sort_keys=True, indent=1)[:-2] + f',\n "tiles": [\n  {tiles}\n ],\n "shapes": [\n  {shapes}\n ]\n}}\n'
