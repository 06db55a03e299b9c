"""The Plan: defaults, readable validation, JSON round-trip, atomic save."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtpstudio.core.errors import PlanError
from mtpstudio.core.plan.choices import CacheType, MoePlacement
from mtpstudio.core.plan.io import load_plan, plan_from_dict, plan_from_json, save_plan
from mtpstudio.core.plan.schema import Plan


def test_defaults_are_safe_for_mtp() -> None:
    plan = Plan()
    assert plan.runtime.parallel == 1  # -np auto would quadruple the recurrent state
    assert plan.server.host == "127.0.0.1"
    assert plan.server.is_loopback
    assert plan.model.path is None and plan.model.card


def test_every_field_has_a_description() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if not field.description:
                missing.append(f"{model.__name__}.{name}")
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                missing += walk(ann)
        return missing

    assert walk(Plan) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"runtime": {"ctx": 100}}, "runtime.ctx: ctx must be at least 256"),
        ({"runtime": {"parallel": 0}}, "parallel (slots) must be between 1 and 256"),
        ({"runtime": {"ubatch": 4096, "batch": 512}}, "ubatch (4096) must not exceed batch (512)"),
        ({"mtp": {"draft_max": 0}}, "mtp.draft_max: draft max must be between 1 and 16"),
        ({"mtp": {"draft_min": 3, "draft_max": 2}}, "draft min (3) must not exceed draft max (2)"),
        ({"mtp": {"draft_p_min": 1.5}}, "draft p-min must be between 0 and 1"),
        ({"server": {"port": 70000}}, "server.port: port must be between 1 and 65535"),
        ({"runtime": {"cache_type_k": "q9_9"}}, "runtime.cache_type_k: input should be"),
        ({"runtime": {"turbo": True}}, "runtime.turbo: unknown setting"),
        ({"model": {"path": None, "card": None}}, "choose a model"),
        ({"model": {"path": "a\nb.gguf"}}, "model path must not contain a newline"),
        ({"outputs": {"service_name": "my unit"}}, "service name may only use"),
        ({"schema_version": 99}, "schema_version 99 is not supported"),
    ],
)
def test_validation_messages_are_readable(data: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError) as info:
        plan_from_dict(data)
    assert message in str(info.value)
    assert "pydantic" not in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"server": {"host": "--api-key-file=/etc/shadow"}}, "server.host: host must be"),
        ({"server": {"host": "-h"}}, "server.host: host must be"),
        ({"server": {"host": "a b"}}, "server.host: host must be"),
        ({"server": {"port": True}}, "server.port: input should be a valid integer"),
        ({"server": {"port": 8080.0}}, "server.port: input should be a valid integer"),
        ({"runtime": {"ctx": "4096"}}, "runtime.ctx: input should be a valid integer"),
        ({"runtime": {"threads": 2**63}}, "threads must be between 1 and"),
        ({"runtime": {"fit_margin_mib": 1e15}}, "runtime.fit_margin_mib: input should be"),
        ({"runtime": {"fit_margin_mib": 2**40}}, "fit margin must be between 0 and"),
        ({"runtime": {"n_cpu_moe": 10**9}}, "n_cpu_moe must be between 0 and"),
        ({"runtime": {"batch": 2**40, "ubatch": 512}}, "batch sizes must be between 1 and"),
        ({"runtime": {"op_offload": 1}}, "runtime.op_offload: input should be a valid boolean"),
        ({"mtp": {"enabled": "true"}}, "mtp.enabled: input should be a valid boolean"),
        ({"mtp": {"draft_p_min": True}}, "mtp.draft_p_min: input should be a valid number"),
        ({"device": "--device=x"}, "device must be"),
        ({"outputs": {"service_name": "h@"}}, "no @"),
    ],
)
def test_loose_values_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError) as info:
        plan_from_dict(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("127.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("llm.lan", False),
    ],
)
def test_only_real_loopback_counts_as_loopback(host: str, loopback: bool) -> None:
    assert plan_from_dict({"server": {"host": host}}).server.is_loopback is loopback


def test_a_deeply_nested_plan_is_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(PlanError, match="nested too deeply") as info:
        load_plan(path)
    assert "\n" not in str(info.value)
    with pytest.raises(PlanError, match="nested too deeply"):
        plan_from_json('{"a": ' * 50 + "1" + "}" * 50)


def test_several_problems_are_reported_together() -> None:
    with pytest.raises(PlanError) as info:
        plan_from_dict({"runtime": {"ctx": 1, "parallel": 0}})
    text = str(info.value)
    assert "ctx must be at least 256" in text and "parallel" in text


def test_json_round_trip_keeps_every_value(tmp_path: Path) -> None:
    plan = plan_from_dict(
        {
            "device": "rtx-4070-super",
            "model": {"path": "/models/Qwen 3.6 – “35B” $HOME%.gguf", "card": None},
            "runtime": {"ctx": 131072, "cache_type_k": "q5_1", "moe": "fit", "threads": 6},
            "mtp": {"draft_max": 3, "draft_p_min": 0.5, "cache_type_v": "q8_0"},
            "server": {"host": "0.0.0.0", "port": 9000, "api_key_file": "/home/u/key file"},
            "desktop": "llvmpipe",
        }
    )
    path = tmp_path / "sub dir" / "plan.json"
    save_plan(plan, path)
    again = load_plan(path)
    assert again == plan
    assert again.runtime.cache_type_k is CacheType.Q5_1
    assert again.runtime.moe is MoePlacement.FIT
    assert json.loads(path.read_text())["schema_version"] == 2
    assert "k3y" not in path.read_text() and 'api_key"' not in path.read_text()


def test_mtp_defaults_to_auto_and_version_1_files_still_load(tmp_path: Path) -> None:
    assert Plan().mtp.enabled is None  # auto
    old = tmp_path / "v1.json"
    data = json.loads(Plan().to_json())
    data["schema_version"] = 1
    for written, loaded in ((True, None), (False, False)):
        data["mtp"]["enabled"] = written
        old.write_text(json.dumps(data))
        plan = load_plan(old)
        assert plan.mtp.enabled is loaded and plan.schema_version == 2
    explicit = plan_from_dict({"mtp": {"enabled": True}})  # version 2: true means on
    assert explicit.mtp.enabled is True


def test_save_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    save_plan(Plan(), path)
    save_plan(plan_from_dict({"runtime": {"ctx": 4096}}), path)
    assert load_plan(path).runtime.ctx == 4096
    assert sorted(os.listdir(tmp_path)) == ["plan.json"]


def test_save_to_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception) as info:
        save_plan(Plan(), blocker / "plan.json")
    assert "cannot write" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON (line 1"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_json_is_a_plan_error(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=r".*") as info:
        plan_from_json(text)
    assert message in str(info.value)


def test_missing_plan_file_is_a_plan_error(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="does not exist"):
        load_plan(tmp_path / "nope.json")


@settings(max_examples=60, deadline=None)
@given(
    ctx=st.integers(256, 1 << 20),
    k=st.sampled_from(list(CacheType)),
    v=st.sampled_from(list(CacheType)),
    draft_max=st.integers(1, 16),
    p_min=st.floats(0, 1, allow_nan=False),
    path=st.text(
        st.characters(blacklist_characters="\n\x00", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=40,
    ),
    port=st.integers(1, 65535),
)
def test_random_plans_round_trip(
    ctx: int, k: CacheType, v: CacheType, draft_max: int, p_min: float, path: str, port: int
) -> None:
    plan = plan_from_dict(
        {
            "model": {"path": path, "card": None},
            "runtime": {"ctx": ctx, "cache_type_k": k.value, "cache_type_v": v.value},
            "mtp": {"draft_max": draft_max, "draft_p_min": p_min},
            "server": {"port": port},
        }
    )
    assert plan_from_json(plan.to_json()) == plan
