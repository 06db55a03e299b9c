"""Remote GGUF headers over real HTTP: what huggingface_hub lists, read with byte ranges only,
planned like the same file on disk; every failure one sentence."""

from __future__ import annotations

import itertools
from pathlib import Path

import huggingface_hub.constants
import pytest

from devkit.hub_repo import QWEN_QUANTS
from devkit.hub_server import HubTestServer
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient, Repo, parse_repo_id
from mtpstudio.core.hub.fit_table import best_row, plan_remote_model, table_rows
from mtpstudio.core.hub.listing import group_models, quant_label
from mtpstudio.core.hub.remote_header import FIRST_RANGE, read_remote_headers
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import machine_for
from mtpstudio.core.units import MIB

from .conftest import QUANTS_REPO, SMALL_REPO, TOKEN, pinned

PLAN = plan_with(Plan(), {"device": "rtx-4070-super", "runtime.ctx": 32768})


def _models(client: HubClient, repo_id: str) -> tuple[Repo, list]:  # type: ignore[type-arg]
    repo = pinned(client, repo_id)
    models, notes = group_models(client.list_files(repo))
    assert notes == []
    return repo, models


def test_repository_names_and_quant_labels() -> None:
    assert parse_repo_id("unsloth/Qwen3.6-35B-A3B-GGUF") == "unsloth/Qwen3.6-35B-A3B-GGUF"
    assert parse_repo_id("https://huggingface.co/unsloth/X-GGUF/tree/main") == "unsloth/X-GGUF"
    with pytest.raises(HubError, match="is not a model repository name"):
        parse_repo_id("just-a-name")
    assert quant_label("Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL"
    assert quant_label("qwen3.6-35b-a3b-iq4_xs.gguf") == "IQ4_XS"
    assert quant_label("Qwen3.6-35B-A3B-Q8_0-00001-of-00003.gguf") == "Q8_0"
    assert quant_label("Model.i1-IQ3_M.gguf") == "i1-IQ3_M"
    assert quant_label("mmproj-F16.gguf") == "F16"
    assert quant_label("model.gguf") is None


def test_every_model_is_listed_and_read_from_its_header_only(
    client: HubClient, hub: HubTestServer, quants_dir: Path
) -> None:
    repo, models = _models(client, QUANTS_REPO)
    assert len(models) == len(QWEN_QUANTS) + 1  # and the projector, listed last
    assert models[-1].is_projector
    hub.reset_counters()
    headers = read_remote_headers(client, repo, models)
    for header in headers[:-1]:
        local = quants_dir / header.model.path
        on_disk = read_model_info(local)
        remote = header.info
        assert header.error is None and remote is not None, header.error
        # the same facts as the file on disk, for every part of a split model
        assert remote.tensors == on_disk.tensors
        assert (remote.file_size, remote.n_nextn_layer, remote.file_type) == (
            on_disk.file_size,
            on_disk.n_nextn_layer,
            on_disk.file_type,
        )
        assert remote.file_size == header.model.size
    # a few MB per file: never past the header's first range and the bytes it asked for next
    for path, sent in hub.bytes_sent.items():
        assert sent <= FIRST_RANGE, (path, sent)
        assert all(end <= FIRST_RANGE for _, end in hub.ranges[path])
    assert headers[-1].info is None and "vision projector" in (headers[-1].error or "")
    assert headers[-1].bytes_read == 0 and "mmproj-F16.gguf" not in hub.bytes_sent
    split = next(h for h in headers if len(h.model.parts) == 3)
    assert split.info is not None
    assert {t.file_index for t in split.info.tensors} == {0, 1, 2}
    for part in split.model.parts[1:]:  # later parts hold only their tensor table
        assert hub.bytes_sent[part.path] <= 256 * 1024


def test_a_header_larger_than_the_first_range_is_read_in_more_ranges(
    client: HubClient, hub: HubTestServer, quants_dir: Path
) -> None:
    repo, models = _models(client, QUANTS_REPO)
    model = next(m for m in models if m.path.endswith("-IQ4_XS.gguf"))
    hub.reset_counters()
    [header] = read_remote_headers(client, repo, [model], first_range=MIB)
    info = read_model_info(quants_dir / model.path)
    assert header.info is not None and header.info.tensors == info.tensors
    ranges = hub.ranges[model.path]
    assert len(ranges) == header.requests > 2
    assert ranges[0] == (0, MIB)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # no byte twice
    assert header.bytes_read == hub.bytes_sent[model.path] < 12 * MIB


def test_a_header_beyond_the_limit_is_one_sentence_in_its_row(
    client: HubClient, hub: HubTestServer
) -> None:
    repo, models = _models(client, QUANTS_REPO)
    model = next(m for m in models if m.path.endswith("-Q6_K.gguf"))
    hub.reset_counters()
    [header] = read_remote_headers(client, repo, [model], first_range=MIB, max_header=3 * MIB)
    assert header.info is None
    assert header.error == ("its header is larger than 3 MiB, more than mtpstudio reads remotely")
    assert hub.bytes_sent[model.path] <= 3 * MIB


def test_the_remote_plan_is_the_plan_of_the_same_file_on_disk(
    client: HubClient, quants_dir: Path
) -> None:
    repo, models = _models(client, QUANTS_REPO)
    headers = read_remote_headers(client, repo, models[:4])
    machine = machine_for(None)
    for header in headers:
        assert header.info is not None
        local = quants_dir / header.model.path
        remote = plan_remote_model(header.info, PLAN, machine, local)
        assert remote == plan_remote_model(read_model_info(local), PLAN, machine, local)


def test_the_table_plans_each_file_and_marks_the_best(client: HubClient, tmp_path: Path) -> None:
    repo, models = _models(client, QUANTS_REPO)
    rows = table_rows(read_remote_headers(client, repo, models), PLAN, machine_for(None), tmp_path)
    by_quant = {r.quant: r for r in rows}
    iq4 = next(r for r in rows if r.header.model.path == "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    no_mtp = next(r for r in rows if r.header.model.path.endswith("IQ4_XS-noMTP.gguf"))
    assert iq4.fit is not None and no_mtp.fit is not None
    assert iq4.has_mtp and iq4.fit.mtp and not no_mtp.has_mtp and not no_mtp.fit.mtp
    # a 19 GB file on a 12 GB card: experts must move, a llvmpipe session would save some
    assert iq4.fit.fits is False and iq4.fit.offload is not None and iq4.fit.offload > 0
    assert iq4.fit.max_ctx is not None and iq4.fit.max_ctx >= PLAN.runtime.ctx
    assert iq4.fit.reclaim is not None and iq4.fit.reclaim_offload is not None
    assert iq4.fit.reclaim_offload < iq4.fit.offload
    assert iq4.fit.plan.model.path == tmp_path / "Qwen3.6-35B-A3B-IQ4_XS.gguf"
    # bigger quants need more experts on the CPU
    assert by_quant["Q2_K"].fit.offload < by_quant["Q8_0"].fit.offload  # type: ignore[union-attr, operator]
    best = best_row(rows)
    assert best is not None
    chosen = rows[best]
    assert chosen.fit is not None and chosen.fit.mtp and chosen.fit.runs
    assert chosen.info is not None and chosen.info.bits_per_weight >= 3.5
    for row in rows:  # nothing with MTP above the floor needs fewer CPU layers
        if row.fit and row.fit.mtp and row.info and row.info.bits_per_weight >= 3.5:
            assert (row.fit.offload or 0) >= (chosen.fit.offload or 0)
    assert rows[-1].fit is None and "vision projector" in (rows[-1].error or "")


def test_a_file_that_is_not_gguf_is_one_sentence_in_its_row(
    client: HubClient, hub: HubTestServer
) -> None:
    repo, models = _models(client, SMALL_REPO)
    [broken] = [m for m in models if m.path == "broken-Q4_K_M.gguf"]
    hub.reset_counters()
    [header] = read_remote_headers(client, repo, [broken])
    assert header.info is None
    assert header.error is not None
    assert "not a usable GGUF model" in header.error and "not a GGUF file" in header.error
    assert header.requests == 1


def test_tree_pages_are_followed(client: HubClient, hub: HubTestServer) -> None:
    hub.faults.page_size = 3
    _repo, models = _models(client, QUANTS_REPO)
    assert len(models) == len(QWEN_QUANTS) + 1
    pages = [p for m, p in hub.requests if m == "GET" and "/tree/" in p]
    assert len(pages) > 4


def test_private_repositories_need_the_token_from_its_usual_place(
    hub: HubTestServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    private = Repo("tester/private-GGUF")
    with pytest.raises(HubError, match=r"not found on .* or it is private and no token was sent"):
        HubClient(hub.endpoint).resolve(private)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    client = HubClient(hub.endpoint)
    repo, models = _models(client, private.repo_id)
    headers = read_remote_headers(client, repo, models)
    assert all(h.info is not None for h in headers if "broken" not in h.model.path)
    assert hub.auth_seen_by_storage == []  # the token stays with the Hub, never the storage
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(HubError, match="the token sent has no access") as info:
        HubClient(hub.endpoint).resolve(private)
    assert info.value.whole_repo and "hf auth login" in (info.value.hint or "")


def test_a_gated_repository_is_said_once_for_the_whole_table(client: HubClient) -> None:
    repo, models = _models(client, "tester/gated-GGUF")  # listing works without access
    with pytest.raises(HubError, match="is gated: its files open only after you accept") as info:
        read_remote_headers(client, repo, models)
    assert info.value.whole_repo


def test_unknown_revision_and_rate_limits_and_no_network(
    client: HubClient, hub: HubTestServer
) -> None:
    with pytest.raises(HubError, match="has no revision 'v9'"):
        client.resolve(Repo(QUANTS_REPO, "v9"))
    hub.faults.rate_limit = 100
    with pytest.raises(HubError, match=r"rate-limiting requests .* \(HTTP 429\)") as info:
        client.resolve(Repo(QUANTS_REPO))
    assert (info.value.hint or "").startswith("Try again in a moment; logged-in users get")
    hub.faults.rate_limit = 0
    dead = HubClient("http://127.0.0.1:9", retries=0)  # the discard port: nothing listens
    with pytest.raises(HubError, match=r"cannot reach http://127\.0\.0\.1:9") as info:
        dead.resolve(Repo(QUANTS_REPO))
    assert "network" in (info.value.hint or "")


def test_a_brief_rate_limit_on_a_range_read_is_waited_out(
    client: HubClient, hub: HubTestServer
) -> None:
    repo, models = _models(client, SMALL_REPO)
    hub.faults.rate_limit = 1  # the next request is answered 429 (Retry-After: 0)
    [header] = read_remote_headers(client, repo, [models[1]])
    assert header.info is not None and header.error is None


def test_a_server_that_ignores_ranges_is_refused_before_it_streams_gigabytes(
    client: HubClient, hub: HubTestServer
) -> None:
    repo, models = _models(client, QUANTS_REPO)
    model = next(m for m in models if m.path.endswith("-IQ4_XS.gguf"))
    hub.faults.ignore_range = True
    hub.reset_counters()
    [header] = read_remote_headers(client, repo, [model])
    assert header.info is None
    assert header.error is not None and "ignored the byte range" in header.error
    assert f"{model.size:,}" in header.error
    assert hub.bytes_sent.get(model.path, 0) < 64 * MIB  # of 19 GB


def test_offline_mode_is_one_sentence(
    client: HubClient, monkeypatch: pytest.MonkeyPatch, hub: HubTestServer
) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set") as info:
        client.resolve(Repo(QUANTS_REPO))
    assert info.value.whole_repo and hub.requests == []
