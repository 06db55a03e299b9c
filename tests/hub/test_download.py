"""Downloads over real HTTP: progress, cancel, resume from the .part size, the Hub's checksum,
free space first, and nothing half-written ever under the model's name."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from devkit.hub_server import HostedFile, HostedRepo, HubTestServer
from mtpstudio.core.cancel import CancelToken
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient, RemoteFile, Repo
from mtpstudio.core.hub.download import DownloadProgress, download_model
from mtpstudio.core.hub.listing import RemoteModel, group_models
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.units import MIB

from .conftest import SMALL_REPO, pinned


class Stop(Exception):
    """The cancel token's error in these tests."""


class Token(CancelToken):
    def cancelled_error(self) -> Exception:
        return Stop()


def _model(client: HubClient, name: str, repo_id: str = SMALL_REPO) -> tuple[Repo, RemoteModel]:
    repo = pinned(client, repo_id)
    models, _ = group_models(client.list_files(repo))
    return repo, next(m for m in models if m.path.startswith(name))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".part" in p.name)


def test_a_download_is_verified_then_renamed_and_reads_as_a_model(
    client: HubClient, hub: HubTestServer, small_dir: Path, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    seen: list[DownloadProgress] = []
    result = download_model(client, repo, model, tmp_path / "models", progress=seen.append)
    [path] = result.paths
    assert path == tmp_path / "models" / "tiny-Q8_0.gguf"
    assert path.read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()
    assert result.fetched_bytes == model.size and result.kept_bytes == 0
    assert _leftovers(path.parent) == []
    assert seen[-1].done == seen[-1].total == model.size
    assert all(a.done <= b.done for a, b in itertools.pairwise(seen))
    assert read_model_info(path).has_mtp
    # the token never reached the storage host; one GET of the whole file
    assert hub.auth_seen_by_storage == []
    assert hub.ranges["tiny-Q8_0.gguf"] == [(0, model.size)]


def test_an_interrupted_download_resumes_from_the_part_size(
    client: HubClient, hub: HubTestServer, small_dir: Path, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    hub.faults.cut_after = {"tiny-Q8_0.gguf": 3 * MIB}
    hub.faults.cuts_left = 10
    with pytest.raises(HubError, match=r"connection broke .* kept in tiny-Q8_0\.gguf\.part") as e:
        download_model(client, repo, model, tmp_path, retries=0)
    assert "resumes" in (e.value.hint or "")
    part = tmp_path / "tiny-Q8_0.gguf.part"
    assert part.stat().st_size == 3 * MIB
    assert not (tmp_path / "tiny-Q8_0.gguf").exists()  # never taken for a model
    hub.faults.cut_after = {}
    hub.reset_counters()
    result = download_model(client, repo, model, tmp_path)
    assert result.kept_bytes == 3 * MIB
    assert result.fetched_bytes == model.size - 3 * MIB
    assert hub.ranges["tiny-Q8_0.gguf"] == [(3 * MIB, model.size)]
    assert hub.bytes_sent["tiny-Q8_0.gguf"] == model.size - 3 * MIB
    assert result.paths[0].read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()
    assert _leftovers(tmp_path) == []


def test_a_broken_connection_is_resumed_within_the_run(
    client: HubClient, hub: HubTestServer, small_dir: Path, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    hub.faults.cut_after = {"tiny-Q8_0.gguf": 5 * MIB}
    hub.faults.cuts_left = 2
    result = download_model(client, repo, model, tmp_path)
    assert [a for a, _ in hub.ranges["tiny-Q8_0.gguf"]] == [0, 5 * MIB, 10 * MIB]
    assert result.paths[0].read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()


def test_cancel_keeps_the_part_and_the_next_run_finishes_it(
    client: HubClient, hub: HubTestServer, small_dir: Path, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    token = Token()
    # progress is reported at most every 0.1 s: a slow link makes sure it is reported mid-file
    # (on loopback the whole file can arrive between two reports)
    hub.faults.chunk_delay_s = 0.15

    def progress(p: DownloadProgress) -> None:
        if p.done >= 2 * MIB:
            token.cancel()

    with pytest.raises(Stop):
        download_model(client, repo, model, tmp_path, cancel=token, progress=progress)
    kept = (tmp_path / "tiny-Q8_0.gguf.part").stat().st_size
    assert 2 * MIB <= kept < model.size
    hub.faults.chunk_delay_s = 0.0
    phases: list[str] = []
    result = download_model(
        client, repo, model, tmp_path, progress=lambda p: phases.append(p.phase)
    )
    assert result.kept_bytes == kept and "checking" in phases
    assert result.paths[0].read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()


def test_a_corrupted_byte_is_caught_by_the_checksum_and_nothing_is_kept(
    client: HubClient, hub: HubTestServer, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    hub.faults.corrupt = {"tiny-Q8_0.gguf": 4_000_000}
    with pytest.raises(HubError, match="failed its check: its SHA256 does not match") as e:
        download_model(client, repo, model, tmp_path)
    assert "damaged download was deleted" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_split_model_downloads_every_part_checked(
    client: HubClient, small_dir: Path, tmp_path: Path
) -> None:
    repo, model = _model(client, "split/")
    assert len(model.parts) > 2
    result = download_model(client, repo, model, tmp_path)
    assert [p.name for p in result.paths] == [p.name for p in model.parts]
    for path in result.paths:
        assert path.read_bytes() == (small_dir / "split" / path.name).read_bytes()
    info = read_model_info(result.paths[0])
    assert info.file_size == model.size


def test_a_part_of_another_version_starts_again(
    client: HubClient, hub: HubTestServer, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    part = tmp_path / "tiny-Q8_0.gguf.part"
    part.write_bytes(b"GGUF" + bytes(1000))
    (tmp_path / "tiny-Q8_0.gguf.part.json").write_text(
        json.dumps({"path": "tiny-Q8_0.gguf", "size": model.size, "sha256": "0" * 64})
    )
    result = download_model(client, repo, model, tmp_path)
    assert result.kept_bytes == 0
    assert any("another version" in n for n in result.notes)
    assert hub.ranges["tiny-Q8_0.gguf"] == [(0, model.size)]


def test_a_file_in_the_way_is_never_overwritten(client: HubClient, tmp_path: Path) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    mine = tmp_path / "tiny-Q8_0.gguf"
    mine.write_bytes(b"my own file")
    with pytest.raises(HubError, match=r"already exists and is not the Hub's file \(its size"):
        download_model(client, repo, model, tmp_path)
    assert mine.read_bytes() == b"my own file"
    mine.write_bytes(bytes(model.size))  # the right size, other bytes
    with pytest.raises(HubError, match=r"not the Hub's file \(its SHA256 differs"):
        download_model(client, repo, model, tmp_path)
    assert mine.read_bytes() == bytes(model.size)


def test_a_file_already_downloaded_is_checked_not_fetched_again(
    client: HubClient, hub: HubTestServer, tmp_path: Path
) -> None:
    repo, model = _model(client, "tiny-Q8_0.gguf")
    download_model(client, repo, model, tmp_path)
    hub.reset_counters()
    phases: list[str] = []
    again = download_model(client, repo, model, tmp_path, progress=lambda p: phases.append(p.phase))
    assert again.fetched_bytes == 0 and hub.bytes_sent == {}
    assert any("matches the Hub's checksum" in n for n in again.notes)
    assert "checking" in phases


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(b"GGUF" + bytes(4096))
        f.truncate(size)
    return path


def test_free_space_is_checked_before_the_first_byte(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    big = _sparse(tmp_path / "huge.gguf", free + 10 * 1024 * MIB)
    with HubTestServer([HostedRepo("t/huge", [HostedFile("huge.gguf", big)])]) as hub:
        client = HubClient(hub.endpoint)
        repo, model = _model(client, "huge.gguf", "t/huge")
        with pytest.raises(HubError, match=r"needs .* GB more in .* but only .* GB are free") as e:
            download_model(client, repo, model, tmp_path / "dl")
        assert "another disk" in (e.value.hint or "")
        assert hub.bytes_sent == {}
    assert list((tmp_path / "dl").iterdir()) == []


def test_a_server_that_ignores_the_resume_range_is_refused_at_once(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "big.gguf", 2 * 1024 * MIB)
    with HubTestServer([HostedRepo("t/big", [HostedFile("big.gguf", big)])]) as hub:
        client = HubClient(hub.endpoint)
        repo, model = _model(client, "big.gguf", "t/big")
        hub.faults.cut_after = {"big.gguf": MIB}
        hub.faults.cuts_left = 1
        with pytest.raises(HubError, match="connection broke"):
            download_model(client, repo, model, tmp_path / "dl", retries=0)
        hub.faults.ignore_range = True
        hub.reset_counters()
        with pytest.raises(HubError, match="ignored the byte range and began sending all"):
            download_model(client, repo, model, tmp_path / "dl")
        assert hub.bytes_sent.get("big.gguf", 0) < 64 * MIB  # of 2 GiB
    assert (tmp_path / "dl" / "big.gguf.part").stat().st_size == MIB  # kept for a real resume


def test_remote_file_names_inside_folders_land_flat(tmp_path: Path) -> None:
    model = RemoteModel((RemoteFile("BF16/x-BF16-00001-of-00002.gguf", 1, "b"),))
    assert model.parts[0].name == "x-BF16-00001-of-00002.gguf"
