"""``make demo``: watch specwatch catch a broken drafter, live, with no GPU.

A simulated SGLang server (``specwatch simulate --real-time``, the ``recovery`` scenario by
default: a collapsed drafter for a minute, then a restart with a working drafter) writes its
log; the exporter tails it; when Prometheus and Alertmanager are installed they run on
loopback with the project's alert rules and a small webhook receiver prints their
notifications. Everything is a child process in its own process group, so Ctrl-C or
``DEMO_SECONDS`` ends all of it.

The parts, in the order data flows: :mod:`.stack` starts the children (:mod:`.processes`) on
loopback, each on its usual port or one the system picks, read back (:mod:`.loopback`), with
the configs of :mod:`.configs`; :mod:`.narrator` turns the exporter's scrapes and
Prometheus's alert states (:mod:`.prometheus`) into lines for the reader, beside the
notifications :mod:`.webhook` receives; :mod:`.__main__` runs it all.
"""
