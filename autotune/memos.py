"""What the process remembers between calls: the call path's plans, lookup's choices and built
kernels, the cost model's fits. One object owns every such memo, so that `clear()` (after tuning
in this process, or between tests) forgets all of them, and no module keeps one of its own.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

T = TypeVar("T")


class Memos:
    """Named memo tables and memoized functions, cleared together."""

    def __init__(self) -> None:
        self._tables: dict[str, dict] = {}
        self._functions: dict[str, Callable] = {}
        self._hooks: list[Callable[[], None]] = []

    def table(self, name: str) -> dict:
        """The memo named `name` ("stage.what"), made empty on first use."""
        return self._tables.setdefault(name, {})

    def function(self, fn: Callable[..., T]) -> Callable[..., T]:
        """`fn` memoized (functools.cache), forgotten with the tables."""
        cached = functools.cache(fn)
        self._functions[f"{fn.__module__}.{fn.__qualname__}"] = cached
        return cached

    def on_clear(self, forget: Callable[[], None]) -> None:
        """Have `clear` call `forget` too: a memo held outside Python (autotune.torch.native's)."""
        self._hooks.append(forget)

    def sizes(self) -> dict[str, int]:
        """How many entries each memo holds."""
        sizes = {name: len(table) for name, table in self._tables.items()}
        sizes.update({name: fn.cache_info().currsize for name, fn in self._functions.items()})
        return sizes

    def clear(self) -> None:
        for table in self._tables.values():
            table.clear()
        for fn in self._functions.values():
            fn.cache_clear()
        for forget in self._hooks:
            forget()


MEMOS = Memos()


def clear() -> None:
    """Forget every memo: lookups, built kernels, the cost model's fits and the call path's plans
    (call it after tuning in this process)."""
    MEMOS.clear()
