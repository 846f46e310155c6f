"""Startup lines and /server_info become a ServerConfig; secrets never survive parsing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.analysis.findings.configuration import eagle3_draft_evidence
from exporter.engines.draft_config import (
    DraftConfigError,
    DraftLookups,
    from_draft_config,
    with_local_draft,
)
from exporter.engines.events import (
    MaxRunningReset,
    MemoryPlan,
    ServerArgsEvent,
    ServerReady,
    WeightsLoaded,
)
from exporter.engines.record import LogLine
from exporter.engines.server_config import ServerConfig
from exporter.engines.sglang import classify
from exporter.engines.sglang_config import from_server_info
from exporter.engines.sglang_startup import parse_event, parse_server_args
from exporter.redact import is_secret_name
from exporter.state.runs import ConfigTracker
from tests.support.fake_sglang import server_info

# Shaped like SGLang's dataclass repr (Feb 2026 field names), with the awkward cases a real
# line has: commas inside strings, JSON inside a string, lists, dicts, None, an object repr.
SERVER_ARGS = (
    "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tokenizer_mode='auto', "
    "api_key='sk-live-0123456789', admin_api_key='adm-secret-42', hf_token='hf_abcdef', "
    'json_model_override_args=\'{"rope_scaling": {"factor": 2.0}, "x": "a, b"}\', '
    "tp_size=8, lora_paths=['a,b', 'c'], served_model_name='kimi, k2.5', "
    "log_level='info', decode_log_interval=40, max_running_requests=None, "
    "speculative_algorithm='EAGLE', speculative_draft_model_path='/models/kimi-k25-eagle3', "
    "speculative_draft_model_revision='main', speculative_num_steps=3, "
    "speculative_eagle_topk=1, speculative_num_draft_tokens=4, "
    "speculative_token_map=None, disable_cuda_graph=False, cuda_graph_max_bs=48, "
    "cuda_graph_bs=[1, 2, 4, 8], enable_metrics=True, tokenizer_path='moonshotai/Kimi-K2.5', "
    "custom_weight_loader=[], kv_events_config=<object object at 0x7f3a2c1d5e40>, "
    "extra={'a': (1, 2)})"
)
SECRETS = ("sk-live-0123456789", "adm-secret-42", "hf_abcdef")


def test_server_args_values_are_python_values() -> None:
    args = parse_server_args(SERVER_ARGS)
    assert args["tp_size"] == 8
    assert args["lora_paths"] == ["a,b", "c"]
    assert args["served_model_name"] == "kimi, k2.5"
    assert json.loads(args["json_model_override_args"])["x"] == "a, b"
    assert args["disable_cuda_graph"] is False
    assert args["max_running_requests"] is None
    assert args["extra"] == {"a": (1, 2)}
    assert args["speculative_num_draft_tokens"] == 4
    assert args["tokenizer_path"] == "moonshotai/Kimi-K2.5"


def test_server_args_non_literal_value_kept_as_text_not_evaluated() -> None:
    args = parse_server_args(SERVER_ARGS)
    assert args["kv_events_config"] == "<object object at 0x7f3a2c1d5e40>"
    hostile = parse_server_args("server_args=ServerArgs(a=__import__('os').getcwd(), b=1)")
    assert hostile == {"a": "__import__('os').getcwd()", "b": 1}


def test_server_args_drops_every_secret_field() -> None:
    args = parse_server_args(SERVER_ARGS)
    for name in ("api_key", "admin_api_key", "hf_token"):
        assert name not in args
    assert not any(secret in repr(args) for secret in SECRETS)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("admin_api_key", True),
        ("hf_token", True),
        ("client_secret", True),
        ("db_password", True),
        ("speculative_num_draft_tokens", False),
        ("max_total_num_tokens", False),
        ("tokenizer_path", False),
    ],
)
def test_secret_names_match_parts_not_substrings(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_truncated_server_args_line_keeps_complete_fields() -> None:
    cut = SERVER_ARGS.index("speculative_draft_model_path") + 40  # inside the path string
    args = parse_server_args(SERVER_ARGS[:cut])
    assert args["tp_size"] == 8
    assert args["speculative_algorithm"] == "EAGLE"
    assert "speculative_draft_model_path" not in args


def test_elided_reference_style_line_parses() -> None:
    line = (
        "server_args=ServerArgs(model_path='m', ..., tp_size=2, ..., "
        "speculative_algorithm='EAGLE3', speculative_num_draft_tokens=4, ...)"
    )
    assert parse_server_args(line) == {
        "model_path": "m",
        "tp_size": 2,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_draft_tokens": 4,
    }


@pytest.mark.parametrize(
    ("message", "event"),
    [
        (
            "Load weight end. elapsed=1.02 s, type=LlamaForCausalLMEagle3, "
            "dtype=torch.bfloat16, avail mem=17.43 GB, mem usage=0.79 GB.",
            WeightsLoaded("LlamaForCausalLMEagle3", draft=True),
        ),
        (
            "Load weight end. elapsed=9.41 s, type=DeepseekV3ForCausalLM, avail mem=1.00 GB",
            WeightsLoaded("DeepseekV3ForCausalLM"),
        ),
        (
            "max_total_num_tokens=1183744, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=48, context_len=131072, available_gpu_mem=16.61 GB",
            MemoryPlan(48),
        ),
        ("The server is fired up and ready to roll!", ServerReady()),
        (
            "Max running requests is reset to 48 for speculative decoding. You can override "
            "this by explicitly setting --max-running-requests.",
            MaxRunningReset(48),
        ),
        ("Init torch distributed begin.", None),
        ("Capture cuda graph begin. This can take up to several minutes.", None),
    ],
)
def test_event_lines_become_typed_events(message: str, event: object) -> None:
    assert parse_event(message) == event


def _feed(tracker: ConfigTracker, line: str) -> None:
    logged = classify(line)
    assert isinstance(logged, LogLine)
    event = parse_event(logged.message)
    assert event is not None
    tracker.observe(event, (logged.dp_rank, logged.tp_rank))


def test_tracker_tells_target_from_draft_per_rank_with_interleaved_ranks() -> None:
    tracker = ConfigTracker()
    lines = [
        f"[2026-02-23 00:10:02] {SERVER_ARGS}",
        "[2026-02-23 00:10:21 TP0] Load weight end. elapsed=9.41 s, type=DeepseekV3ForCausalLM, "
        "dtype=torch.bfloat16, avail mem=123.10 GB, mem usage=7.66 GB.",
        "[2026-02-23 00:10:22 TP1] Load weight end. elapsed=9.50 s, type=DeepseekV3ForCausalLM, "
        "dtype=torch.bfloat16, avail mem=123.10 GB, mem usage=7.66 GB.",
        "[2026-02-23 00:10:34 TP1] Load weight end. elapsed=1.02 s, type=LlamaForCausalLMEagle3, "
        "dtype=torch.bfloat16, avail mem=17.43 GB, mem usage=0.79 GB.",
        "[2026-02-23 00:10:44 TP0] max_total_num_tokens=1183744, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=131072, "
        "available_gpu_mem=16.61 GB",
        "[2026-02-23 00:10:52] The server is fired up and ready to roll!",
    ]
    for line in lines:
        _feed(tracker, line)
    config = tracker.config
    assert config.algorithm == "EAGLE"
    assert config.target_architecture == "DeepseekV3ForCausalLM"
    assert config.draft_architecture == "LlamaForCausalLMEagle3"
    assert config.max_running_requests == 48
    assert config.num_draft_tokens == 4


def test_a_load_is_the_drafts_by_the_engines_word_or_by_its_order_on_its_rank() -> None:
    """Which class names a draft's is the engine's to say (``WeightsLoaded.draft``): the
    tracker knows none, and without that word only a rank's second load is its draft."""
    tracker = ConfigTracker()
    tracker.observe(WeightsLoaded("LlamaForCausalLMEagle3"), rank=0)
    assert tracker.config.target_architecture == "LlamaForCausalLMEagle3"
    assert tracker.config.draft_architecture is None
    tracker.observe(WeightsLoaded("ToyDraftHead", draft=True), rank=1)  # rank 1's first load
    assert tracker.config.draft_architecture == "ToyDraftHead"
    tracker.observe(WeightsLoaded("ToyTarget"), rank=2)
    tracker.observe(WeightsLoaded("ToySecondModel"), rank=2)
    assert tracker.config.target_architecture == "ToyTarget"
    assert tracker.config.draft_architecture == "ToySecondModel"


def test_new_server_args_line_forgets_the_previous_run() -> None:
    tracker = ConfigTracker()
    _feed(tracker, f"[2026-02-23 00:10:02] {SERVER_ARGS}")
    _feed(tracker, "[2026-02-23 00:10:21] Load weight end. elapsed=9 s, type=LlamaForCausalLM, x")
    _feed(
        tracker, "[2026-02-23 00:10:34] Load weight end. elapsed=1 s, type=LlamaForCausalLMEagle3"
    )
    restart = SERVER_ARGS.replace("speculative_algorithm='EAGLE'", "speculative_algorithm='EAGLE3'")
    _feed(tracker, f"[2026-02-23 01:00:00] {restart}")
    assert tracker.config.algorithm == "EAGLE3"
    assert tracker.config.draft_architecture is None
    _feed(tracker, "[2026-02-23 01:00:21] Load weight end. elapsed=9 s, type=LlamaForCausalLM, x")
    assert tracker.config.target_architecture == "LlamaForCausalLM"
    assert tracker.config.draft_architecture is None


def test_server_info_gives_config_with_effective_running_cap() -> None:
    # SGLang keeps the algorithm as typed (lower case here); the cap of 48 is the scheduler's.
    info = server_info(speculative_algorithm="eagle", log_level="warning", decode_log_interval=40)
    config = from_server_info(json.loads(info))
    assert config == ServerConfig(
        engine="sglang",  # only SGLang serves /server_info
        served_model="moonshotai/Kimi-K2.5",  # its model_path, no served_model_name given
        algorithm="EAGLE",
        draft_model_path="AQ-MedAI/Kimi-K2-Instruct-eagle3",
        num_steps=3,
        eagle_topk=1,
        num_draft_tokens=4,
        disable_cuda_graph=False,
        cuda_graph_max_bs=160,
        log_level="warning",
        decode_log_interval=40,
        max_running_requests=48,
        enable_metrics=True,
    )


@pytest.mark.parametrize(
    ("flags", "cap"),
    [
        ("max_running_requests=512, dp_size=8, enable_dp_attention=True", 64),
        ("max_running_requests=500, dp_size=8, enable_dp_attention=True", 62),  # floor, as SGLang
        ("max_running_requests=512, dp_size=8, enable_dp_attention=False", 512),  # plain DP
        ("max_running_requests=512, dp_size=1, enable_dp_attention=True", 512),
        ("max_running_requests=None, dp_size=8, enable_dp_attention=True", None),
    ],
)
def test_running_cap_is_each_schedulers_share(flags: str, cap: int | None) -> None:
    """With DP attention ``--max-running-requests`` is the node's and each DP rank's scheduler
    takes an equal share: the figure its decode lines' running requests are held against, and
    the one its own startup line and ``/server_info`` report."""
    tracker = ConfigTracker()
    _feed(tracker, f"[2026-02-23 00:10:02] server_args=ServerArgs(model_path='m', {flags})")
    assert tracker.config.max_running_requests == cap
    info = {"max_running_requests": 512, "dp_size": 8, "enable_dp_attention": True}
    assert from_server_info(info).max_running_requests == 64


def test_server_info_with_wrong_types_yields_unknown_not_wrong_values() -> None:
    info = {"speculative_num_draft_tokens": "4", "disable_cuda_graph": "no", "log_level": 3}
    config = from_server_info(info)
    assert config.num_draft_tokens is None
    assert config.disable_cuda_graph is None
    assert config.log_level is None


def _write_draft(folder: Path, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, **extra}
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_draft_config_folder_or_file(tmp_path: Path) -> None:
    folder = _write_draft(
        tmp_path / "draft",
        draft_vocab_size=32000,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
    )
    for path in (folder, folder / "config.json"):
        config = from_draft_config(path)
        assert config.draft_architecture == "LlamaForCausalLMEagle3"
        assert config.draft_has_eagle_config is True
        assert config.draft_vocab_size == 32000
        assert eagle3_draft_evidence(config) is not None


def test_plain_architecture_with_eagle_config_is_an_eagle3_draft(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "eagle_config": {}})
    )
    assert "eagle_config" in (eagle3_draft_evidence(from_draft_config(folder)) or "")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("{not json", "not valid JSON"), ("[1, 2]", "not a JSON object")],
)
def test_bad_draft_config_is_a_clear_error(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DraftConfigError, match=message):
        from_draft_config(path)


def test_local_draft_path_is_read_when_it_exists(tmp_path: Path) -> None:
    folder = _write_draft(tmp_path / "kimi-k25-draft")
    drafts = DraftLookups()
    named = ServerConfig(algorithm="EAGLE", draft_model_path=str(folder))
    assert with_local_draft(named, drafts).draft_architecture == "LlamaForCausalLMEagle3"
    remote = ServerConfig(draft_model_path="org/does-not-exist-here")
    assert with_local_draft(remote, drafts) == replace(remote, draft_config="absent")


def test_each_target_reads_and_counts_its_own_draft_paths(tmp_path: Path) -> None:
    """No answer or failure of one target's draft paths is another's: two targets naming the
    same unreadable path count it once each, and a third never counts it."""
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text("[]")  # not a JSON object
    one, two, third = DraftLookups(), DraftLookups(), DraftLookups()
    named = ServerConfig(draft_model_path=str(folder))
    for drafts in (one, one, two):
        assert with_local_draft(named, drafts).draft_config == "invalid"
    assert one.failure_counts() == two.failure_counts() == {"invalid": 1}
    assert third.failure_counts() == {}


def test_a_targets_draft_answers_are_bounded(tmp_path: Path) -> None:
    drafts = DraftLookups()
    first = ServerConfig(draft_model_path=str(_write_draft(tmp_path / "first")))
    assert with_local_draft(first, drafts).draft_config == "read"
    for index in range(DraftLookups.SIZE):
        with_local_draft(ServerConfig(draft_model_path=f"org/draft-{index}"), drafts)
    (tmp_path / "first" / "config.json").unlink()  # forgotten, so read again: gone now
    assert with_local_draft(first, drafts).draft_config == "absent"


def test_merged_prefers_known_newer_fields() -> None:
    older = ServerConfig(algorithm="EAGLE", num_draft_tokens=4, log_level="info")
    newer = ServerConfig(num_draft_tokens=16)
    assert older.merged(newer) == ServerConfig(
        algorithm="EAGLE", num_draft_tokens=16, log_level="info"
    )


def test_a_merge_follows_the_configs_it_is_given_while_many_come_and_go() -> None:
    """Merges are remembered by the configs' identity: one made anew after others were
    dropped (and their ids reused) must be merged anew, never answered by an old one."""
    older = ServerConfig(algorithm="EAGLE", num_draft_tokens=4)
    for tokens in range(3000):  # past the memo's bound, so it is cleared and refilled
        newer = ServerConfig(num_draft_tokens=tokens)
        assert older.merged(newer).num_draft_tokens == tokens
        assert older.merged(newer).algorithm == "EAGLE"
    assert older.merged(ServerConfig()) == older


# SGLang 0.5.23 logs ``server_args.resolved_dict()``: the same fields as a dict's repr.
SERVER_ARGS_DICT = (
    "server_args={'model_path': 'moonshotai/Kimi-K2.5', 'tokenizer_mode': 'auto', "
    "'api_key': 'sk-live-0123456789', 'admin_api_key': 'adm-secret-42', 'hf_token': "
    "'hf_abcdef', 'json_model_override_args': '{\"rope_scaling\": {\"factor\": 2.0}}', "
    "'tp_size': 8, 'lora_paths': ['a,b', 'c'], 'served_model_name': 'kimi: k2.5', "
    "'speculative_algorithm': 'NGRAM', 'speculative_num_draft_tokens': 8, "
    "'speculative_adaptive': False, 'speculative_adaptive_config': None, "
    "'kv_events_config': <object object at 0x7f3a2c1d5e40>, 'extra': {'a': (1, 2)}}"
)


def test_sglang_0_5_23_dict_of_server_args_is_read_as_the_repr_is() -> None:
    event = parse_event(SERVER_ARGS_DICT)
    assert isinstance(event, ServerArgsEvent)
    config = event.config
    assert (config.engine, config.algorithm, config.num_draft_tokens) == ("sglang", "NGRAM", 8)
    assert config.served_model == "kimi: k2.5"
    args = parse_server_args(SERVER_ARGS_DICT)
    assert args["speculative_algorithm"] == "NGRAM"
    assert args["speculative_num_draft_tokens"] == 8
    assert args["lora_paths"] == ["a,b", "c"]
    assert args["served_model_name"] == "kimi: k2.5"
    assert args["extra"] == {"a": (1, 2)}
    assert args["kv_events_config"] == "<object object at 0x7f3a2c1d5e40>"
    assert not any(secret in repr(args) for secret in SECRETS)
    assert "api_key" not in args


def test_a_cut_dict_of_server_args_keeps_its_complete_fields() -> None:
    args = parse_server_args("server_args={'tp_size': 2, 'speculative_algorithm': 'EAG")
    assert args == {"tp_size": 2}


def test_server_args_event_from_full_line() -> None:
    event = parse_event(SERVER_ARGS)
    assert isinstance(event, ServerArgsEvent)
    assert event.config.algorithm == "EAGLE"


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True).filter(
    lambda name: not is_secret_name(name)
)


@given(st.dictionaries(_names, _values, max_size=8))
def test_any_dataclass_repr_round_trips(fields: dict[str, object]) -> None:
    body = ", ".join(f"{name}={value!r}" for name, value in fields.items())
    assert parse_server_args(f"server_args=ServerArgs({body})") == fields


@given(st.dictionaries(_names, _values, max_size=8))
def test_any_dict_of_server_args_round_trips(fields: dict[str, object]) -> None:
    assert parse_server_args(f"server_args={fields!r}") == fields


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(tail: str) -> None:
    assert isinstance(parse_server_args("server_args=ServerArgs(" + tail), dict)
    assert isinstance(parse_server_args("server_args={" + tail), dict)
