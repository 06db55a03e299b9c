"""Hub test fixtures: a quant repository (ten full-size zero-weight models), small real GGUFs
to download, and the local Hub serving them over real HTTP (devkit.hub_server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest
from support.gguf_builders import QT, Qwen35MoeParams, write_qwen35moe

from devkit.hub_repo import QWEN_QUANTS, not_gguf_bytes, quant_repo
from devkit.hub_server import HostedFile, HostedRepo, HubTestServer
from mtpstudio.core.catalog.qwen36 import QWEN36_35B_A3B_IQ4_XS
from mtpstudio.core.hub.client import HubClient, Repo

QUANTS_REPO = "unsloth/Qwen3.6-35B-A3B-GGUF"
SMALL_REPO = "tester/tiny-qwen35moe-GGUF"
TOKEN = "hf_test_token_0123456789"


@pytest.fixture(autouse=True)
def _no_token_from_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub reads HF_TOKEN and ~/.cache/huggingface/token: neither leaks in."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "hf-token"))
    monkeypatch.setattr(
        huggingface_hub.constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-stored")
    )


@pytest.fixture(scope="session")
def quants_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B at ten quants (two split), zero-weight and full size, with its mmproj."""
    folder = tmp_path_factory.mktemp("quants")
    quant_repo(folder, QUANTS_REPO, QWEN36_35B_A3B_IQ4_XS, QWEN_QUANTS)
    return folder


def quants_repo(folder: Path) -> HostedRepo:
    files = [
        HostedFile(str(p.relative_to(folder)), p, lfs=p.suffix == ".gguf")
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]
    return HostedRepo(QUANTS_REPO, files)


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small real GGUFs (random weights) to download whole: a qwen35moe with an MTP layer of
    about 14 MB, the same split in three, and a file that is not GGUF."""
    folder = tmp_path_factory.mktemp("small")
    params = Qwen35MoeParams(
        n_trunk=4,
        n_embd=512,
        n_head=8,
        n_head_kv=2,
        head_dim=64,
        n_expert=16,
        n_expert_used=4,
        n_ff_exp=256,
        n_ff_shexp=256,
        ssm_state=32,
        ssm_group=4,
        ssm_dt_rank=8,
        vocab_size=4096,
        context_length=32768,
        expert_type=QT.Q8_0,
        file_type=7,
    )
    write_qwen35moe(folder / "tiny-Q8_0.gguf", params, with_data=True)
    (folder / "split").mkdir()
    write_qwen35moe(
        folder / "split" / "tiny-Q8_0.gguf", params, with_data=True, split_max_tensors=40
    )
    (folder / "broken-Q4_K_M.gguf").write_bytes(not_gguf_bytes())
    return folder


def small_repo(folder: Path, **kw: object) -> HostedRepo:
    files = [
        HostedFile("tiny-Q8_0.gguf", folder / "tiny-Q8_0.gguf"),
        *(HostedFile(f"split/{p.name}", p) for p in sorted((folder / "split").glob("*.gguf"))),
        HostedFile("broken-Q4_K_M.gguf", folder / "broken-Q4_K_M.gguf"),
    ]
    return HostedRepo(SMALL_REPO, files, **kw)  # type: ignore[arg-type]


@pytest.fixture
def hub(quants_dir: Path, small_dir: Path) -> Iterator[HubTestServer]:
    repos = [
        quants_repo(quants_dir),
        small_repo(small_dir),
        HostedRepo("tester/private-GGUF", small_repo(small_dir).files, private=True, token=TOKEN),
        HostedRepo("tester/gated-GGUF", small_repo(small_dir).files, gated=True, token=TOKEN),
    ]
    with HubTestServer(repos) as server:
        yield server


@pytest.fixture
def client(hub: HubTestServer) -> HubClient:
    return HubClient(hub.endpoint, retries=1)


def pinned(client: HubClient, repo_id: str) -> Repo:
    return Repo(repo_id, client.resolve(Repo(repo_id)))
