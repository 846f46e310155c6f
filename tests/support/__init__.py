"""What tests share: real tools and ports, waiting, writing logs, fakes and running processes.

- ``tools``: the repository root, real external tools (``require_tool``), free loopback ports.
- ``waiting``: ``wait_for``, the one deadline-bounded wait for a positive condition.
- ``files``: ``append``, one write to the end of a log, as a logging process does; ``write_log``.
- ``loglines``: builders of SGLang log lines and whole server logs.
- ``metrics``: reading expositions (``Scrape``) and rendering a collector at a fixed clock.
- ``tailing``: a recording ``TailEvents`` and file tailers, stepped with ``poll()`` or running.
- ``records``: ``StatsRecord`` builders, for tests that start past the parser.
- ``sinks``: a ``RecordSink`` keeping what the line processor reports.
- ``fake_sglang``: a loopback HTTP server playing SGLang's ``/metrics`` and ``/server_info``.
- ``daemon``: the real ``specwatch run`` (and ``simulate``, ``doctor``) as subprocesses.
- ``realprom``: real Prometheus, Alertmanager and a webhook receiver on loopback.
- ``proc``: what a running process costs, and the budgets tests hold it to.
- ``deploy``: the config a shipped deploy command line runs with.
- ``custom_rules``: the documented custom-rule example.

Test modules import from here, never from each other.
"""
