"""The optional speed budget: multi-window, multi-burn-rate alerts on windows that did not pay.

With ``speed_slo`` set (say 0.95: 95 % of decode windows must beat the baseline), the share of
node moments at or below the baseline (``specwatch_windows_vs_baseline_total``) is recorded
over four windows, and two alerts burn the 5 % budget as the SRE workbook sets them: fast (14.4
times the budget over 1 hour and 5 minutes, a page) and slow (6 times over 6 hours and 30
minutes, a ticket). The short window makes an alert stop soon after the node recovers; the long
one keeps a blip from firing. A burn factor that would need more than every window is capped at
every window. Targets without a baseline have no such counter and never fire.
"""

from __future__ import annotations

from exporter.mixin.rules import Group, Rule, sel, where
from exporter.mixin.rules import _alert as alert
from exporter.mixin_config import MixinConfig

WINDOWS = ("5m", "30m", "1h", "6h")
# (name, severity, burn factor, long window, short window)
BURNS = (
    ("SpecDecodeSpeedBudgetFastBurn", "critical", 14.4, "1h", "5m"),
    ("SpecDecodeSpeedBudgetSlowBurn", "warning", 6.0, "6h", "30m"),
)


def record(window: str) -> str:
    return f"target:specwatch_windows_at_or_below_baseline:ratio_rate{window}"


def budget_rules(config: MixinConfig) -> list[Group]:
    """The recording rules of the share of windows at or below the baseline, or none."""
    if config.speed_slo is None:
        return []
    # Windows with drafting off (adaptive speculation) are plain decoding: outside the SLI.
    windows = sel(config, "specwatch_windows_vs_baseline_total", 'speed=~"at_or_below|above"')
    slow = sel(config, "specwatch_windows_vs_baseline_total", 'speed="at_or_below"')
    rules: list[Rule] = [
        {
            "record": record(w),
            # No window judged (idle, or no baseline): 0/0 gives nothing, never a page.
            "expr": f"sum without (speed) (rate({slow}[{w}]))\n/\n"
            f"sum without (speed) (rate({windows}[{w}]))\n",
        }
        for w in WINDOWS
    ]
    return [{"name": "specwatch.speed-budget.rules", "rules": rules}]


def budget_alerts(config: MixinConfig) -> list[Group]:
    """The fast- and slow-burn alerts, or none."""
    if config.speed_slo is None:
        return []
    budget = 1 - config.speed_slo
    rules = []
    for name, severity, factor, long, short in BURNS:
        limit = round(min(factor * budget, 1.0), 6)
        expr = (
            f"{sel(config, record(long))} >= {limit:g}\n"
            f"and\n{sel(config, record(short))} >= {limit:g}\n"
        )
        rules.append(
            alert(
                config,
                name,
                expr,
                severity,
                "Speculation is burning its speed budget: too many windows no faster than the "
                "baseline.",
                f"On {{{{ $labels.target }}}} ({where(config)}) "
                "{{ $value | humanizePercentage }} of the decode windows of the last "
                f"{long} were no faster than the baseline, and at least {limit * 100:.3g}% of "
                f"the last {short}: the speed objective ({config.speed_slo:.1%} of windows "
                f"faster) leaves a budget of {budget:.1%}, spent at least {limit / budget:.3g} "
                "times too fast.",
            )
        )
    return [{"name": "specwatch.speed-budget", "rules": rules}]
