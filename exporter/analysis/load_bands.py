"""One fixed set of load bands for every node: the running requests a baseline is learned at.

A node's own past, its plain fleet peers and its drafting-off windows are compared at the
same loads only if every node cuts load the same way, whatever its size. The bands are powers
of two: a decode step's cost grows with the batch, and doubling bands keep throughput nearly
constant within a band at every scale, in eleven label values (a bounded ``band`` label).
"""

from __future__ import annotations

# (label, lowest, highest running requests on the node); the top band is open-ended.
PLAIN_BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1),
    ("2", 2, 2),
    ("3-4", 3, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-32", 17, 32),
    ("33-64", 33, 64),
    ("65-128", 65, 128),
    ("129-256", 129, 256),
    ("257-512", 257, 512),
    ("513+", 513, None),
)
BAND_LABELS = tuple(label for label, _, _ in PLAIN_BANDS)


def band_of(running: float) -> int:
    """The index in :data:`PLAIN_BANDS` of a node running ``running`` requests (1 at least).

    Band ``i`` above the first holds ``2**(i-1) < running <= 2**i``: the bit length of
    ``running - 1``. A fractional mean (a learned point) rounds up, as a load is whole.
    """
    whole = max(1, -int(-running // 1))
    return min((whole - 1).bit_length(), len(PLAIN_BANDS) - 1)
