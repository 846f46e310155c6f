"""A uniform sample of a stream of unknown length, paid for per kept item instead of per item.

Classic reservoir sampling draws a random number for every item of the stream; a report of a
busy log reads hundreds of thousands of decode windows to keep two thousand. Algorithm L
(Li, 1994) draws instead how many items to pass over before the next one it keeps: a stream of
``n`` items costs about ``k * (1 + log(n / k))`` draws, and every item still ends up in the
sample with the same chance, ``k / n``.
"""

from __future__ import annotations

import math
import random
from typing import Generic, TypeVar

T = TypeVar("T")

_LN2 = math.log(2.0)


class Reservoir(Generic[T]):
    """At most ``size`` items of a stream, each equally likely to be among them.

    The caller counts the stream (positions from 1) and hands over only the item whose position
    is ``due``: the items in between are never kept, so they need not even be built.
    """

    def __init__(self, size: int, rng: random.Random) -> None:
        if size < 1:
            raise ValueError("a reservoir holds at least one item")
        self.items: list[T] = []
        self.due = 1
        self._size = size
        self._rng = rng
        self._log_w = 0.0  # log of W, the shrinking parameter of the skips

    def keep(self, item: T) -> None:
        """Take the item at position ``due``, then draw the position of the next one to keep."""
        items = self.items
        if len(items) < self._size:
            items.append(item)
            if len(items) < self._size:
                self.due += 1
                return
        else:
            items[self._rng.randrange(self._size)] = item
        self._log_w += math.log(self._open_unit()) / self._size
        skip = math.log(self._open_unit()) / _log1mexp(self._log_w)
        self.due += math.floor(skip) + 1

    def _open_unit(self) -> float:
        """A uniform draw strictly between 0 and 1, so that both logarithms above are finite
        and negative."""
        while True:
            draw = self._rng.random()
            if draw > 0.0:
                return draw


def _log1mexp(a: float) -> float:
    """``log(1 - exp(a))`` for ``a < 0``, accurate at both ends (Mächler): ``W`` starts within a
    rounding error of 1, where ``1 - W`` would be 0, and shrinks towards 0 on a long stream."""
    if a > -_LN2:
        return math.log(-math.expm1(a))
    return math.log1p(-math.exp(a))
