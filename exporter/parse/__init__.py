"""From raw log bytes to records: container envelopes, the line pipeline and user rules.

The engine-specific grammar lives in :mod:`exporter.engines`; this package decides which lines
reach it and unwraps what the platform wrapped around them."""
