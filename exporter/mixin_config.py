"""The mixin config: how one user's Prometheus and Grafana see specwatch, in one YAML file.

``make mixin CONFIG=FILE OUT=DIR`` renders the alert rules, recording rules and dashboards from
it; ``specwatch doctor`` and ``specwatch report`` take the same file (``--mixin-config FILE``)
and judge by its thresholds, so the one-shot verdicts never contradict the user's own alerts.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from exporter import PROJECT_URL, __version__
from exporter.analysis.algorithms import LOWEST_FLOOR
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.parse.custom_rules import compile_rule
from exporter.settings import ConfigError, Invalid, Strict, load_yaml, validate

# One PromQL label matcher: name, operator, double-quoted value with Go's escapes only (an
# unknown one such as `\q` made Prometheus refuse every rule).
_ESCAPE = r'\\(?:[abfnrtv\\"]|x[0-9A-Fa-f]{2}|[0-7]{3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})'
_MATCHER = rf' *([A-Za-z_][A-Za-z0-9_]*) *(=~|!~|!=|=) *"((?:[^"\\]|{_ESCAPE})*)" *'
_SELECTOR = re.compile(rf"^{_MATCHER}(?:,{_MATCHER})*$")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Kubernetes label: optional DNS prefix, a name of up to 63 characters, a value of up to 63.
_K8S_KEY = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_K8S_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_UID_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,33}$")
_ABSOLUTE_URL = re.compile(r"^https?://[^/\s?#]+(?:/[^\s?#]*)?$")
RUNBOOK_FIELDS = frozenset({"base", "alertname", "alertname_lower"})
# The runbook of this release in the project's repository: absolute, so that a link opens from
# Alertmanager's notifications as well as from Grafana. Serve your own copy (the rendering
# writes runbook.md) and set runbook_url_base to it.
DEFAULT_RUNBOOK_URL_BASE = f"{PROJECT_URL}/blob/v{__version__}/alerts/runbook.md"
DEFAULT_RUNBOOK_URL_TEMPLATE = "{base}#{alertname_lower}"
# Grafana's own default address; alerts link their dashboard under it (dashboard_url).
DEFAULT_GRAFANA_URL = "http://localhost:3000"


class MixinConfig(Strict, frozen=True):
    """Selectors, labels, links, thresholds and dashboard identity of one rendering."""

    # PromQL label matchers every rule and dashboard query puts on every specwatch series.
    selector: str = 'job="specwatch"'
    runbook_url_base: str = DEFAULT_RUNBOOK_URL_BASE
    runbook_url_template: str = DEFAULT_RUNBOOK_URL_TEMPLATE
    grafana_url: str = DEFAULT_GRAFANA_URL
    # Labels of the PrometheusRule object: what the Operator's ruleSelector matches.
    rule_labels: dict[str, str] = msgspec.field(default_factory=lambda: {"role": "alert-rules"})
    # Labels every alert carries, for Alertmanager routing (team, service...).
    alert_labels: dict[str, str] = msgspec.field(default_factory=dict)
    thresholds: Thresholds = DEFAULT
    dashboard_tags: Annotated[list[str], Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["specwatch"]
    )
    dashboard_uid_prefix: str = "specwatch"
    # Thanos, Mimir, Cortex: series of several clusters in one place, told apart by a label.
    multi_cluster: bool = False
    cluster_label: str = "cluster"
    # Share of decode windows that must beat the baseline (e.g. 0.95); set, it renders the
    # multi-window, multi-burn-rate speed-budget alerts. Off by default.
    speed_slo: Annotated[float, Meta(gt=0, lt=1)] | None = None

    def __post_init__(self) -> None:
        """Each key's rule, in the order of the keys; a rule may give the value its one
        spelling (the selector's matchers joined by ", ", a URL without its trailing "/")."""
        for key, rule in _KEY_RULES.items():
            try:
                value = rule(getattr(self, key))
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            if value is not None:
                msgspec.structs.force_setattr(self, key, value)

    def matchers(self) -> tuple[str, ...]:
        """The selector as separate matchers, for queries that add their own."""
        return tuple(_split_matchers(self.selector))

    def runbook_url(self, alertname: str) -> str:
        return self.runbook_url_template.format(
            base=self.runbook_url_base, alertname=alertname, alertname_lower=alertname.lower()
        )

    def runbook_index(self) -> str:
        """The runbook itself: the template's address without the per-alert fragment."""
        return self.runbook_url("").split("#", 1)[0]


def _matchers(value: str) -> str:
    # The exporter-down alerts read `up{selector}`: an empty selector would page for every
    # target Prometheus scrapes.
    _printable(value)
    if not _SELECTOR.match(value):
        raise ValueError('must be PromQL label matchers, e.g. job="specwatch"')
    for match in re.finditer(_MATCHER, value):
        name, operator, quoted = match.groups()
        if name.startswith("__"):
            raise ValueError(f"{name}: a reserved label name (__name__ would name the metric)")
        if operator in ("=~", "!~"):
            _regex(name, _unquote(quoted))
    return ", ".join(m.strip() for m in _split_matchers(value))


def _placeholders(value: str) -> None:
    _template_safe(value)
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError as exc:
        raise ValueError(f"not a valid template: {exc}") from None
    unknown = fields - RUNBOOK_FIELDS
    if unknown or not value.strip():
        raise ValueError("may use only {base}, {alertname} and {alertname_lower}")


def _absolute(value: str) -> str:
    # A relative link opens neither from a notification nor from another Grafana folder.
    _template_safe(value)  # both are written into annotations
    if not _ABSOLUTE_URL.match(value):
        raise ValueError("must be an absolute http(s) URL, e.g. https://grafana.example.com")
    return value.rstrip("/")


def _kubernetes_labels(value: dict[str, str]) -> None:
    for key, label in value.items():
        if not _K8S_KEY.match(key) or not _K8S_VALUE.match(label):
            raise ValueError(f"{key}: not a valid Kubernetes label")


def _prometheus_labels(value: dict[str, str]) -> None:
    for key, label in value.items():
        if not _LABEL_NAME.match(key) or key.startswith("__"):
            raise ValueError(f"{key}: not a Prometheus label name")
        if key == "severity":
            raise ValueError("severity: set by each alert, routing depends on it")
        try:
            _template_safe(label)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None


def _sane_thresholds(value: Thresholds) -> None:
    for key in ("collapsed_for", "low_accept_for", "slower_for", "no_benefit_for"):
        if not _DURATION.match(getattr(value, key)):
            raise ValueError(f"{key}: must be a Prometheus duration, e.g. 10m")
    if not 1 <= value.collapsed_accept_length < LOWEST_FLOOR:
        raise ValueError(
            "collapsed_accept_length: must be at least 1 and below every algorithm's "
            f"accept-length floor ({LOWEST_FLOOR:g})"
        )
    if not 0 < value.low_accept_fraction <= 1:
        raise ValueError("low_accept_fraction: must be above 0 and at most 1")
    if value.slower_than_baseline_speedup <= 0:
        raise ValueError("slower_than_baseline_speedup: must be above 0")
    if not 0 < value.drafting_off_speedup <= value.slower_than_baseline_speedup:
        raise ValueError(
            "drafting_off_speedup: must be above 0 and at most slower_than_baseline_speedup"
        )
    if not 0 < value.no_benefit_share < 1:
        raise ValueError("no_benefit_share: must be above 0 and below 1")
    if value.no_benefit_min_requests < 1:
        raise ValueError("no_benefit_min_requests: must be at least 1")
    if value.no_benefit_window != DEFAULT.no_benefit_window:
        # The daemon and doctor judge the share over the same 15 minutes.
        raise ValueError(f"no_benefit_window: is {DEFAULT.no_benefit_window}, as the exporter's")


def _tags(value: list[str]) -> None:
    for tag in value:
        _printable(tag)


def _uid(value: str) -> None:
    # Grafana caps a uid at 40 characters; "-fleet" takes six.
    if not _UID_PREFIX.match(value):
        raise ValueError("must be 1-34 letters, digits, '_' or '-'")


def _label_name(value: str) -> None:
    if not _LABEL_NAME.match(value) or value.startswith("__"):
        raise ValueError("not a Prometheus label name")


# Each key's rule, in the order of the keys: it raises ValueError saying what is wrong, and
# returns the value's one spelling where it has one (None: as given).
_KEY_RULES: dict[str, Callable[[Any], object]] = {
    "selector": _matchers,
    "runbook_url_base": _absolute,
    "runbook_url_template": _placeholders,
    "grafana_url": _absolute,
    "rule_labels": _kubernetes_labels,
    "alert_labels": _prometheus_labels,
    "thresholds": _sane_thresholds,
    "dashboard_tags": _tags,
    "dashboard_uid_prefix": _uid,
    "cluster_label": _label_name,
}


def _printable(value: str) -> None:
    """No control character: a carriage return in the selector, written into a YAML comment
    of the rendered rules, made promtool read one injected rule instead of the 17 alerts."""
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(f"a control character ({bad!r}) is not allowed")


def _template_safe(value: str) -> None:
    """Alert labels and annotations are Go templates to Prometheus: ``{{`` in one made it
    refuse the rule file."""
    _printable(value)
    if "{{" in value:
        raise ValueError("'{{' is not allowed: Prometheus reads it as a template")


def _unquote(quoted: str) -> str:
    """A PromQL string's body (Go's escapes) as the text it stands for."""

    def one(match: re.Match[str]) -> str:
        escape = match.group(0)[1:]
        if escape[0] in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[escape[0]]
        if escape[0] in "xuU":
            return chr(int(escape[1:], 16))
        if escape[0].isdigit():
            return chr(int(escape, 8))
        return escape  # \\ or \"

    return re.sub(_ESCAPE, one, quoted)


def _regex(name: str, pattern: str) -> None:
    """Prometheus compiles a matcher's regex with Go's RE2 syntax, anchored: one it cannot
    (``job=~"("``) made it refuse every rule."""
    try:
        compile_rule(f"^(?:{pattern})$")
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _split_matchers(selector: str) -> list[str]:
    """Split on the commas between matchers, not those inside quoted values."""
    return [m.group(0).strip() for m in re.finditer(_MATCHER, selector)]


def load_mixin_config(path: Path | None) -> MixinConfig:
    """The validated file, or the defaults (the shipped rendering) without one."""
    if path is None:
        return MixinConfig()
    data: dict[str, Any] = load_yaml(path)
    try:
        return validate(MixinConfig, data)
    except Invalid as exc:
        said = "; ".join(f"{p.key}: {REMOVED.get(p.key) or p.text}" for p in exc.problems)
        raise ConfigError(f"mixin config {path}: {said}") from None


# Keys earlier releases took, with what replaced them: a config kept from then is refused
# with the reason rather than a bare "unexpected".
REMOVED = {
    "thresholds.low_accept_length": (
        "removed: each algorithm now has its own accept-length floor, which the exporter "
        "exports (specwatch_accept_length_floor; docs/metrics.md, Algorithms); delete the key"
    ),
}
