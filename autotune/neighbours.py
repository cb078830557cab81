"""Configs for shapes nobody tuned, chosen from measurements at the nearest measured shapes.

A measured table (shipped per GPU model as autotune/data/measured/<gpu>.json, made by
studies/step23_table.py and `table_of`) holds, for each of many training shapes, the speed of
every candidate: a tile of the shipped records or of the shape rule, run whole (`vector`) or with
K split by wave arithmetic (`splitk`, autotune.space.wave_splits), all timed through the call path
on one GPU. For a shape asked, its NEIGHBOURS nearest training shapes (autotune.cache.shape_distance)
vote: a candidate scores the mean, weighted by 1 / (1 + distance), of the log of its speed over
the best speed at each neighbour, and the best score wins. The winner's K-split is then worked
out for the shape asked and this GPU's SMs, so a tile measured split at one shape is split as
this shape needs. Measured speeds transfer better than a tuned row's lone config or the cost
model's prices (`leave_one_out` measures it on the table itself; docs/performance.md, step 23).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from autotune.cache import shape_distance
from autotune.space import wave_splits

NEIGHBOURS = 3
#: a candidate not measured at a neighbour (its tile was not tried there) counts as this share
#: of that neighbour's best
UNMEASURED = 0.3
POLICIES = ("whole", "split")


@dataclass(frozen=True)
class Pick:
    family: str
    config: dict
    basis: str  # the neighbours it was measured at and how it fared there


def candidate_name(tile_index: int, policy: str) -> str:
    return f"{tile_index}:{policy}"


def config_for(tile: dict, policy: str, m: int, n: int, k: int, sm_count: int) -> tuple[str, dict]:
    """The (family, params) of a candidate at (M, N, K): a split candidate splits K as wave
    arithmetic asks there, which may be not at all."""
    splits = wave_splits(m, n, k, tile, sm_count) if policy == "split" else 1
    return ("splitk", {**tile, "splits": splits}) if splits > 1 else ("vector", dict(tile))


def choose(table: dict, m: int, n: int, k: int, sm_count: int, deterministic: bool = False,
           feasible=lambda family, params: True) -> Pick | None:
    """The candidate of `table` its NEIGHBOURS nearest shapes rate best for (M, N, K); with
    `deterministic`, whole candidates only. None for an empty table."""
    shapes = table["shapes"]
    if not shapes:
        return None
    near = sorted(shapes, key=lambda s: (shape_distance((m, n, k), (s["m"], s["n"], s["k"])), s["m"], s["n"], s["k"]))
    near = near[:NEIGHBOURS]
    weights = [1 / (1 + shape_distance((m, n, k), (s["m"], s["n"], s["k"]))) for s in near]
    names = sorted({name for s in near for name in s["gflops"]})
    scored = []
    for name in names:
        index, policy = name.split(":")
        if deterministic and policy == "split":
            continue
        family, params = config_for(table["tiles"][int(index)], policy, m, n, k, sm_count)
        if not feasible(family, params):
            continue
        score = sum(w * math.log(_speed(s, int(index), policy) / max(s["gflops"].values()))
                    for w, s in zip(weights, near)) / sum(weights)
        scored.append((score, name, family, params))
    if not scored:
        return None
    score, name, family, params = max(scored, key=lambda entry: (entry[0], entry[1]))
    index, policy = name.split(":")
    fared = ", ".join(f"{s['m']}x{s['n']}x{s['k']} {_speed(s, int(index), policy) / max(s['gflops'].values()):.2f}"
                      for s in near)
    split = f", K split {params['splits']} ways" if family == "splitk" else ""
    basis = (f"measured: tile {index} of {table['device']}'s table{split}; at the {len(near)} nearest of "
             f"{len(shapes)} measured shapes it ran at {fared} of the best")
    return Pick(family, params, basis)


def _speed(shape: dict, index: int, policy: str) -> float:
    """A candidate's GFLOPS at a measured shape; a split candidate that wave arithmetic left whole
    there is its whole run."""
    found = shape["gflops"]
    value = found.get(candidate_name(index, policy)) or found.get(candidate_name(index, "whole"))
    return value or UNMEASURED * max(found.values())


def leave_one_out(table: dict, sm_count: int) -> list[dict]:
    """For each measured shape: the candidate chosen from the other shapes, and its speed there
    relative to the best candidate and to cuBLAS."""
    found = []
    for index, shape in enumerate(table["shapes"]):
        others = {**table, "shapes": table["shapes"][:index] + table["shapes"][index + 1:]}
        pick = choose(others, shape["m"], shape["n"], shape["k"], sm_count)
        tile = {k: v for k, v in pick.config.items() if k != "splits"}
        policy = "split" if pick.family == "splitk" else "whole"
        speed = _speed(shape, table["tiles"].index(tile), policy)
        best = max(shape["gflops"].values())
        found.append({"m": shape["m"], "n": shape["n"], "k": shape["k"], "of_best": speed / best,
                      "vs_cublas": speed / shape["cublas_gflops"] if shape.get("cublas_gflops") else None})
    return found


def table_of(measured: dict, cc: str, sm_count: int) -> dict:
    """A table from studies/step23_table.py's output: its vector and splitk jobs per shape, the
    tiles numbered in order of first appearance."""
    tiles: list[dict] = []
    shapes = []
    for entry in measured["shapes"]:
        speeds = {}
        for job in entry["jobs"]:
            if job["family"] not in ("vector", "splitk") or not job.get("gflops"):
                continue
            tile = {k: v for k, v in job["params"].items() if k != "splits"}
            if tile not in tiles:
                tiles.append(tile)
            name = candidate_name(tiles.index(tile), "split" if job["family"] == "splitk" else "whole")
            speeds[name] = max(speeds.get(name, 0.0), round(job["gflops"], 1))
        if speeds:
            m, n, k = entry["shape"]
            shapes.append({"m": m, "n": n, "k": k, "cublas_gflops": round(entry.get("cublas_gflops") or 0, 1),
                           "gflops": speeds})
    return {"device": measured["device"], "cc": cc, "sm_count": sm_count, "dtype": "float32", "layout": "NN",
            "kernels": measured.get("kernels", {}), "tiles": tiles, "shapes": shapes}


def dumps(table: dict) -> str:
    """The table as shipped: one line per tile and per shape."""
    tiles = ",\n  ".join(json.dumps(t, sort_keys=True) for t in table["tiles"])
    shapes = ",\n  ".join(json.dumps(s, sort_keys=True) for s in table["shapes"])
    head = {k: v for k, v in table.items() if k not in ("tiles", "shapes")}
    return json.dumps(head, sort_keys=True, indent=1)[:-2] + f',\n "tiles": [\n  {tiles}\n ],\n "shapes": [\n  {shapes}\n ]\n}}\n'
