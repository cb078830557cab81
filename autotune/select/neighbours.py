"""Configs for shapes nobody tuned, chosen from measurements at the nearest measured shapes.

A measured table (shipped per GPU model as autotune/data/measured/<gpu>.json.xz, made by
studies/table.py, which builds it from the step 25 to 40 studies (docs/performance.md)) holds,
for each of many training shapes, the speed of every candidate, all timed through the call path on
one GPU. A candidate is a tile (of the shipped records, of the shape rule, or a skinny variant)
and a policy: at a shape, the tile is fitted to it (autotune.space.guesses.fit_tile: a side longer than
the product's shrinks) and K is split as the policy's wave arithmetic says there
(autotune.space.guesses.SPLIT_POLICIES), which may be not at all, or (policy "stream") all the tiles'
k-steps are shared out among STREAM_WORKERS blocks per SM (kernels.streamk). For a shape asked,
its NEIGHBOURS nearest training shapes (autotune.store.rows.shape_distance) vote: a candidate scores
the mean, weighted by 1 / (1 + distance), of the log of its speed over
the best speed at each neighbour that the lookup may take (its precision, determinism), and the
best score wins, fitted and split for the shape asked. A neighbour whose rows are aligned
otherwise than the product's stands farther (`distance`). A tile may also name a family with
tiles and schedules of its own (a tensor-core family's, step 40): it fits the shape as the family
says (Family.fit; step 55: wgmma's swapped tiles narrow to M), and K is taken whole or split to fill
the waves (FILL). Measured speeds transfer better
than a tuned row's lone config or the cost model's prices (`leave_one_out` measures it on the
table itself; docs/performance.md, steps 23, 24 and 40).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import kernels
from autotune.select.model import geometry
from autotune.space.guesses import (
    MIN_SPLIT_STEPS,
    SPLIT_POLICIES,
    STREAM_WORKERS,
    TILE_SCHEDULES,
    fit_tile,
    policy_splits,
)
from autotune.store.rows import shape_distance
from kernels.rules import unaligned_for

NEIGHBOURS = 8
#: a candidate not measured at a neighbour (its tile was not tried there) counts as this share
#: of that neighbour's best
UNMEASURED = 0.3
#: what a measured shape's rows aligned otherwise than the product's add to its distance
#: (`distance`), chosen by `leave_one_out` (docs/performance.md, step 40)
ALIGNMENT_DISTANCE = 0.5
STREAM = "stream"
POLICIES = (*SPLIT_POLICIES, STREAM)
#: the policy of a family's own tiles (`policies_for`): K split the fewest ways whose blocks fill
#: their waves within FILL_SLACK of the fullest split (`fill_splits`)
FILL = "fill"
FILL_SLACK = 0.05


@dataclass(frozen=True)
class Pick:
    family: str
    config: dict
    name: str  # the candidate: "<tile index>:<policy>"
    basis: str  # the neighbours it was measured at and how it fared there


def candidate_name(tile_index: int, policy: str) -> str:
    return f"{tile_index}:{policy}"


def config_for(tile: dict, policy: str, shape: tuple[int, int, int], sm_count: int, cc: str) -> tuple[str, dict]:
    """The (family, params) of a candidate at `shape` (M, N, K) on a GPU of `sm_count` SMs of
    compute capability `cc`: its tile (the shape rules' family's, autotune.space.guesses.TILE_SCHEDULES,
    or the one its "family" names) fitted to the shape, K split as its policy asks there, which
    may be not at all, or streamed."""
    if "family" in tile:
        return _family_config(tile, policy, shape, (sm_count, cc))
    m, n, k = shape
    fitted = fit_tile(tile, m, n, k)
    if policy == STREAM:
        return TILE_SCHEDULES.config(fitted, workers_per_sm=STREAM_WORKERS)
    return TILE_SCHEDULES.config(fitted, policy_splits(policy, shape, fitted, sm_count))


def policies_for(tile: dict) -> tuple[str, ...]:
    """The policies of a tile: of a rule tile, the POLICIES its schedules have; of a tile of a
    family with its own schedules, whole and (if it splits K) FILL."""
    if "family" in tile:
        return ("whole", FILL) if kernels.family(tile["family"]).schedules.split else ("whole",)
    schedules = TILE_SCHEDULES
    return tuple(p for p in POLICIES if p == "whole" or (schedules.stream if p == STREAM else schedules.split))


def _family_config(tile: dict, policy: str, shape: tuple[int, int, int], gpu: tuple[int, str]) -> tuple[str, dict]:
    """config_for a tile of a family with tiles and schedules of its own (a tensor-core family's):
    fitted to the product as the family says (Family.fit; by default each side shrunk to the
    smallest of the family's sizes that covers it), K split as
    `fill_splits` says (policy FILL) or by the wave arithmetic at the family's own K-step, at most
    as many ways as its space has."""
    entry = kernels.family(tile["family"])
    params = {name: value for name, value in tile.items() if name != "family"}
    if entry.fit:
        params = entry.fit(params, shape)
    else:
        for side, length in zip(("bm", "bn"), shape):
            params[side] = min([size for size in entry.space[side] if size >= length] + [params[side]])
    if policy == STREAM:
        return entry.schedules.config(params, workers_per_sm=STREAM_WORKERS)
    if policy == FILL:
        return entry.schedules.config(params, fill_splits(entry.name, params, shape, gpu))
    splits = policy_splits(policy, shape, {**params, "bk": entry.footprint(params, "float32").bk}, gpu[0])
    return entry.schedules.config(params, min(splits, max(entry.space.get("splits", [1]))))


def fill_splits(family: str, params: dict, shape: tuple[int, int, int], gpu: tuple[int, str]) -> int:
    """The fewest K-splits of the family's space, each keeping MIN_SPLIT_STEPS k-steps, whose
    blocks fill their waves on a GPU of (SM count, compute capability) `gpu` within FILL_SLACK of
    the fullest (autotune.select.model.Geometry.efficiency, with the blocks an SM holds)."""
    m, n, k = shape
    sm_count, cc = gpu
    step = kernels.family(family).footprint(params, "float32").bk
    options = [s for s in kernels.family(family).space["splits"] if s == 1 or k >= s * MIN_SPLIT_STEPS * step]
    filled = {s: geometry(family, {**params, "splits": s}, "float32", cc).efficiency(m, n, sm_count) for s in options}
    return min(s for s, share in filled.items() if share >= max(filled.values()) - FILL_SLACK)


def choose(table: dict, shape: tuple[int, int, int], sm_count: int, feasible=lambda family, params: True,
           layout: str = "NN") -> Pick | None:
    """The candidate of `table` its NEIGHBOURS nearest shapes rate best for a product of `shape`
    in `layout`, among those whose config there is `feasible`. None for an empty table."""
    found = ranked(table, shape, sm_count, feasible, count=1, layout=layout)
    return found[0] if found else None


def ranked(table: dict, shape: tuple[int, int, int], sm_count: int, feasible=lambda family, params: True,
           count: int | None = None, layout: str = "NN") -> list[Pick]:
    """The candidates as `choose` rates them for `shape`, best first, each config once; `count`
    of them at most. A candidate's share at a neighbour is of the best feasible one there."""
    shapes = table["shapes"]
    if not shapes:
        return []
    apart = {id(s): distance(shape, layout, s, table) for s in shapes}
    near = sorted(shapes, key=lambda s: (apart[id(s)], s["m"], s["n"], s["k"]))[:NEIGHBOURS]
    weights = [1 / (1 + apart[id(s)]) for s in near]
    configs = {}
    for name in sorted({name for s in near for name in s["gflops"]}):
        family, params = config_for(table["tiles"][index_of(name)], name.split(":")[1], shape, sm_count, table["cc"])
        if feasible(family, params):
            configs[name] = family, params
    if not configs:
        return []
    bests = [max([s["gflops"][name] for name in configs if name in s["gflops"]] or s["gflops"].values())
             for s in near]
    scored = sorted(((sum(w * math.log(_speed(s, name, best) / best) for w, s, best in zip(weights, near, bests))
                      / sum(weights), name) for name in configs), reverse=True)
    picks, seen = [], []
    for _, name in scored:
        family, params = configs[name]
        if (family, params) in seen:
            continue
        seen.append((family, params))
        fared = ", ".join(f"{s['m']}x{s['n']}x{s['k']} {_speed(s, name, best) / best:.2f}"
                          for s, best in zip(near, bests))
        split = (f", K split {params['splits']} ways" if params.get("splits", 1) > 1 else
                 f", stream-K on {params['workers_per_sm']} blocks per SM" if family == TILE_SCHEDULES.stream else "")
        basis = (f"measured: tile {index_of(name)} of {table['device']}'s table{split}; at the {len(near)} nearest of "
                 f"{len(shapes)} measured shapes it ran at {fared} of the best")
        picks.append(Pick(family, params, name, basis))
        if count is not None and len(picks) == count:
            break
    return picks


def distance(shape: tuple[int, int, int], layout: str, measured: dict, table: dict) -> float:
    """How far a shape `measured` in `table` stands from a product of `shape` in `layout`: their
    autotune.store.rows.shape_distance, plus ALIGNMENT_DISTANCE where only one of them has rows
    that are not 16-byte aligned (kernels.rules.unaligned_for), whose kernels move them otherwise."""
    other, dtype = (measured["m"], measured["n"], measured["k"]), table["dtype"]
    unlike = bool(unaligned_for(*shape, layout, dtype)) != bool(unaligned_for(*other, table["layout"], dtype))
    return shape_distance(shape, other) + ALIGNMENT_DISTANCE * unlike


def index_of(name: str) -> int:
    return int(name.split(":")[0])


def _speed(shape: dict, name: str, best: float) -> float:
    """A candidate's GFLOPS at a measured shape, or UNMEASURED of the best there."""
    return shape["gflops"].get(name) or UNMEASURED * best


def leave_one_out(table: dict, sm_count: int, feasible_at=lambda shape: lambda family, params: True) -> list[dict]:
    """For each measured shape: the candidate chosen from the other shapes, and its speed there
    relative to the best feasible candidate and to cuBLAS. feasible_at(shape) says which configs
    may serve that shape, as lookup's feasibility does for its problem (a precision's K, say)."""
    found = []
    for index, shape in enumerate(table["shapes"]):
        others = {**table, "shapes": table["shapes"][:index] + table["shapes"][index + 1:]}
        asked = (shape["m"], shape["n"], shape["k"])
        feasible = feasible_at(asked)
        pick = choose(others, asked, sm_count, feasible)
        best = max(speed for name, speed in shape["gflops"].items()
                   if feasible(*config_for(table["tiles"][index_of(name)], name.split(":")[1], asked, sm_count,
                                           table["cc"])))
        speed = _speed(shape, pick.name, best)
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
