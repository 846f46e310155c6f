"""Per-target state: what a target's sources have said so far, and snapshots of it."""
