"""Render specwatch's alerts, recording rules and dashboards for one user's mixin config."""
