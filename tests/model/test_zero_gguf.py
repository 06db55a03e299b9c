"""Zero-weight GGUFs: the card's header byte for byte, tensor data as a sparse hole."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.zero_gguf import disk_bytes, main, write_zero_gguf
from mtpstudio.core.catalog.models import model_card_path, model_cards
from mtpstudio.core.model.gguf import read_gguf

# both models at their default quant, the smallest and an ik_llama.cpp one (each card's header
# is its own: the tensor table and the file type)
CARDS = [
    "qwen3.6-35b-a3b-iq4_xs",
    "qwen3.6-27b-iq4_xs",
    "qwen3.6-27b-iq1_s",
    "qwen3.6-35b-a3b-iq4_ks",
]


@pytest.mark.parametrize("card", CARDS)
def test_a_card_becomes_a_whole_sparse_gguf(card: str, tmp_path: Path) -> None:
    header = model_card_path(card)
    out = write_zero_gguf(header, tmp_path / "zero.gguf")
    g = read_gguf(out)
    assert g.has_tensor_data  # every tensor's bytes lie inside the file
    with open(out, "rb") as a, open(header, "rb") as b:
        assert a.read(g.data_offset) == b.read(g.data_offset)
    assert {c.card_id for c in model_cards()} >= set(CARDS)
    end = max(g.data_offset + t.offset + t.n_bytes for t in g.tensors)
    assert out.stat().st_size == end > 7 * 10**9  # every byte of the weights
    assert disk_bytes(out) < 64 * 2**20  # sparse: only the header takes blocks
    with open(out, "rb") as f:
        f.seek(g.data_offset + g.tensors[-1].offset)
        assert f.read(4096) == bytes(4096)


def test_cli_refuses_an_unknown_card_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["no-such-card", str(tmp_path / "x.gguf")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown model card" in err
    assert not (tmp_path / "x.gguf").exists()


def test_cli_says_when_the_output_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["qwen3.6-35b-a3b-iq4_xs", str(blocker / "x.gguf")]) == 2
    assert "cannot write" in capsys.readouterr().err
