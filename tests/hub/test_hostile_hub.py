"""A hostile Hub (or mirror) over real HTTP: paging to another host, odd names and sizes,
same-named files in two folders, headers that never end, and planted links in the download
folder. Each case refuses in one sentence, reads within its budget, and writes only its own
files."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from devkit.hub_server import HostedFile, HostedRepo, HubTestServer
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient, Repo, parse_repo_id
from mtpstudio.core.hub.download import download_model
from mtpstudio.core.hub.listing import group_models
from mtpstudio.core.hub.remote_header import (
    EXTRA_LISTING_BYTES,
    FIRST_RANGE,
    listing_budget,
    read_remote_headers,
)
from mtpstudio.core.units import MIB

from .conftest import TOKEN

SECRET = b"outside: never appended to\n"


def endless_header(path: Path, claimed: int = 60 * MIB) -> Path:
    """A GGUF whose only key claims a ``claimed``-byte string: the header never ends within
    the per-file cap (a sparse file of that size, zeros after the key)."""
    key = b"general.name"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    head += struct.pack("<IQ", 8, claimed)
    with open(path, "wb") as out:
        out.write(head)
        out.truncate(len(head) + claimed + 4096)
    return path


def serve(tmp_path: Path, files: dict[str, bytes | Path], **repo: object) -> HubTestServer:
    hosted = []
    for rel, content in files.items():
        if isinstance(content, Path):
            hosted.append(HostedFile(rel, content))
            continue
        source = tmp_path / "src" / f"{len(hosted)}.bin"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(content)
        hosted.append(HostedFile(rel, source))
    return HubTestServer([HostedRepo("eve/hostile-GGUF", hosted, **repo)])  # type: ignore[arg-type]


def test_the_token_never_follows_a_next_page_to_another_host(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {f"m{i}-Q4_0.gguf": b"GGUF" for i in range(5)}
    with serve(tmp_path, files, private=True, token=TOKEN) as hub:
        hub.faults.page_size = 2
        client = HubClient(hub.endpoint, TOKEN, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        assert len(client.list_files(repo)) == 5  # pages on the Hub's own origin are followed
        hub.faults.next_page_origin = hub.storage  # another host (port) serves "page 2"
        with pytest.raises(HubError, match="another host") as caught:
            client.list_files(repo)
        assert caught.value.whole_repo
    assert hub.auth_seen_by_storage == []


def test_names_with_control_characters_and_sizes_below_one_are_left_out(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {
        "good-Q4_0.gguf": b"GGUF....",
        "x\n  ★ fits  yes.gguf": b"GGUF....",
        "t\x1b]0;pwned\x07-Q8_0.gguf": b"GGUF....",
        "empty-Q2_K.gguf": b"",
        "negative-Q3_K.gguf": b"GGUF....",
    }
    with serve(tmp_path, files) as hub:
        hub.faults.listed_size["negative-Q3_K.gguf"] = -5
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        models, notes = group_models(client.list_files(repo))
    assert [m.path for m in models] == ["good-Q4_0.gguf"]
    assert len(notes) == 4
    assert all("\n" not in n and "\x1b" not in n and "\x07" not in n for n in notes)
    assert any("x\\x0a" in n and "control characters" in n for n in notes)
    assert any("empty-Q2_K.gguf" in n and "empty" in n for n in notes)
    assert any("negative-Q3_K.gguf" in n and "no size" in n for n in notes)


def test_a_zero_byte_or_negative_size_file_never_crashes_a_download(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {"empty.gguf": b"", "neg.gguf": b"GGUF"}
    with serve(tmp_path, files) as hub:
        hub.faults.listed_size["neg.gguf"] = -1
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        listed = {f.path: f for f in client.list_files(repo)}
        from mtpstudio.core.hub.listing import RemoteModel

        folder = tmp_path / "dl"
        result = download_model(client, repo, RemoteModel((listed["empty.gguf"],)), folder)
        assert result.paths[0].read_bytes() == b""
        raw = listed["neg.gguf"]
        assert raw.problem is not None
        forced = type(raw)(path="neg.gguf", size=4, blob_id=raw.blob_id)  # HEAD says -1
        with pytest.raises(HubError, match="size of -1 bytes"):
            download_model(client, repo, RemoteModel((forced,)), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["empty.gguf"]


def test_same_named_files_in_two_folders_are_two_rows_and_two_files(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {
        "a/tiny-Q4_0.gguf": b"GGUF-a",
        "b/tiny-Q4_0.gguf": b"GGUF-bb",
        "other-Q8_0.gguf": b"GGUF-c",
    }
    with serve(tmp_path, files) as hub:
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        models, _ = group_models(client.list_files(repo))
        names = sorted(m.name for m in models)
        assert names == ["a/tiny-Q4_0.gguf", "b/tiny-Q4_0.gguf", "other-Q8_0.gguf"]
        folder = tmp_path / "dl"
        got = [download_model(client, repo, m, folder).paths[0] for m in models]
    assert sorted(str(p.relative_to(folder)) for p in got) == names
    assert (folder / "a/tiny-Q4_0.gguf").read_bytes() == b"GGUF-a"
    assert (folder / "b/tiny-Q4_0.gguf").read_bytes() == b"GGUF-bb"


def test_header_reads_of_a_listing_stay_within_its_budget(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {
        f"endless-{q}.gguf": endless_header(tmp_path / f"e{q}.gguf")
        for q in ("Q2_K", "Q3_K", "Q4_0", "Q5_0")
    }
    with serve(tmp_path, files) as hub:
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        models, _ = group_models(client.list_files(repo))
        budget = listing_budget(models)
        headers = read_remote_headers(client, repo, models)
        sent = sum(hub.bytes_sent.values())
    assert budget.total == 4 * FIRST_RANGE + EXTRA_LISTING_BYTES
    assert sent <= budget.total, f"{sent / MIB:.0f} MiB read"
    assert all(h.error is not None and h.info is None for h in headers)
    assert any("budget" in (h.error or "") for h in headers)


def test_a_planted_part_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {"tiny-Q4_0.gguf": b"GGUF" + bytes(range(256)) * 40}
    outside = tmp_path / "outside"
    outside.write_bytes(SECRET)
    folder = tmp_path / "dl"
    folder.mkdir()
    with serve(tmp_path, files) as hub:
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        models, _ = group_models(client.list_files(repo))
        for planted in ("tiny-Q4_0.gguf.part", "tiny-Q4_0.gguf"):
            (folder / planted).symlink_to(outside)
            with pytest.raises(HubError, match="symbolic link"):
                download_model(client, repo, models[0], folder)
            (folder / planted).unlink()
        (folder / "tiny-Q4_0.gguf.part").write_bytes(b"GGUF")  # a real part, a linked sidecar
        (folder / "tiny-Q4_0.gguf.part.json").symlink_to(outside)
        with pytest.raises(HubError, match="symbolic link"):
            download_model(client, repo, models[0], folder)
        (folder / "tiny-Q4_0.gguf.part").unlink()  # no part: the sidecar link is replaced
        download_model(client, repo, models[0], folder)
        assert not (folder / "tiny-Q4_0.gguf.part.json").exists()
        assert outside.read_bytes() == SECRET
        (folder / "tiny-Q4_0.gguf").unlink()
        os.mkfifo(folder / "tiny-Q4_0.gguf.part")
        with pytest.raises(HubError, match="not a regular file"):
            download_model(client, repo, models[0], folder)


def test_a_download_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    files: dict[str, bytes | Path] = {"tiny-Q4_0.gguf": b"GGUF"}
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/var/tmp")  # root's (world-writable, sticky): not the user's own
    with serve(tmp_path, files) as hub:
        client = HubClient(hub.endpoint, retries=0)
        repo = Repo("eve/hostile-GGUF", client.resolve(Repo("eve/hostile-GGUF")))
        models, _ = group_models(client.list_files(repo))
        with pytest.raises(HubError, match="belongs to another user"):
            download_model(client, repo, models[0], theirs)
    assert not (theirs / "tiny-Q4_0.gguf").exists()


@pytest.mark.parametrize("text", ["a--b/c", "a/b..c", "a/b.git", "a/" + "x" * 97, "a/-b"])
def test_repository_ids_looser_than_the_hub_s_are_one_sentence(text: str) -> None:
    with pytest.raises(HubError, match="is not a model repository name"):
        parse_repo_id(text)
