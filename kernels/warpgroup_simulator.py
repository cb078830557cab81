"""The simulator's twins of kernels.warpgroup's device functions (that module's docstring): each
call posts the thread's part of A and meets its warpgroup's other threads at a barrier; the
warpgroup's product is computed once, in float64 and rounded to float32."""

from __future__ import annotations

import threading

import numpy as np

from . import wgmma_layout as layout


def _nothing():
    pass


def _identity(values):
    return values


_barriers_lock = threading.Lock()


def _simulated_barrier(count: int, arrive_only: bool, barrier_id) -> None:
    """A named barrier of the block's: the `count`-th arrival starts its next generation."""
    manager = threading.current_thread()._manager
    with _barriers_lock:
        barriers = manager.__dict__.setdefault("mmtune_barriers", {})
        state = barriers.setdefault(barrier_id, {"condition": threading.Condition(), "generation": 0, "arrived": 0})
    with state["condition"]:
        generation = state["generation"]
        state["arrived"] += 1
        if state["arrived"] == count:
            state["generation"], state["arrived"] = generation + 1, 0
            state["condition"].notify_all()
        elif not arrive_only:
            state["condition"].wait_for(lambda: state["generation"] != generation)


def _simulated_address(array):
    return 0


def _simulated_add(a, b):
    return tuple(np.float32(x) + np.float32(y) for x, y in zip(a, b))


def _simulated_multiply(n: int):
    threads = np.arange(layout.THREADS)
    rows, columns = layout.accumulator(threads[:, None], np.arange(n // 2)[None, :])
    a_at = layout.a_fragment(threads[:, None], np.arange(4)[None, :])

    def product(words, posted, group):
        mine = [posted[group * layout.THREADS + t] for t in threads]
        A = np.zeros((layout.ROWS, layout.STEP_K), np.float32)
        A[a_at] = np.array([a for a, _ in mine], np.float32)
        A = (A.view(np.uint32) & layout.TF32_BITS).view(np.float32)
        B = layout.operand(words, int(mine[0][1]), n)
        with np.errstate(all="ignore"):  # Inf * 0 and Inf - Inf are NaN, as on the GPU
            return A.astype(np.float64) @ B.astype(np.float64).T

    def multiply(words, sums, a, b_descriptor, accumulate):
        thread = threading.current_thread()  # the simulator's BlockThread
        state = thread._manager.__dict__.setdefault("mmtune_wgmma", {"calls": {}, "posted": ({}, {}),
                                                                     "products": ({}, {})})
        calls = state["calls"].get(thread.thread_id, 0)
        state["calls"][thread.thread_id] = calls + 1
        # alternate buffers, as kernels.warp_mma's twin does
        posted, products = state["posted"][calls % 2], state["products"][calls % 2]
        posted[thread.thread_id] = (a, b_descriptor)
        group, member = divmod(thread.thread_id, layout.THREADS)
        _simulated_barrier(layout.THREADS, False, ("wgmma", group))
        found = products.get(group)
        if found is None or found[0] != calls:
            found = products[group] = (calls, product(words, posted, group))
        mine = found[1][rows[member], columns[member]]
        with np.errstate(all="ignore"):
            before = np.array(sums, np.float64) if accumulate else 0.0
            return tuple((before + mine).astype(np.float32))

    return multiply


def _simulated_biases(n: int, transposed: bool):
    registers, side = np.arange(n // 2), 0 if transposed else 1
    return lambda bias, thread, first: tuple(
        np.float32(bias[c] if c < bias.shape[0] else 0) for c in first + layout.accumulator(thread, registers)[side])


def _simulated_store(n: int, adds: bool, transposed: bool):
    lock = threading.Lock()

    def store(C, sums, thread, row0, col0):
        rows, columns = layout.accumulator(thread, np.arange(n // 2))
        places = zip(col0 + columns, row0 + rows) if transposed else zip(row0 + rows, col0 + columns)
        for value, (r, c) in zip(sums, places):
            if r < C.shape[0] and c < C.shape[1]:
                if adds:
                    with lock:
                        C[r, c] += value
                else:
                    C[r, c] = value

    return store
