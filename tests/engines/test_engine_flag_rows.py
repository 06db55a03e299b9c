"""Each engine flag is one row of ``engines.flags.ENGINE_FLAGS`` (issue 46): the probe table and
the spellings both flavours share are read off the rows, never written again."""

from __future__ import annotations

import importlib

import pytest

from mtpstudio.core.engines.flags import (
    CANDIDATE_FLAGS,
    ENGINE_FLAGS,
    FILE_PROBED_FLAGS,
    SHARED_SPELLINGS,
    Option,
)


def test_every_option_has_exactly_one_row() -> None:
    options = [row.option for row in ENGINE_FLAGS if row.option is not None]
    assert len(options) == len(set(options))
    assert set(options) == set(Option)


def test_a_spelling_belongs_to_one_row() -> None:
    spellings = [s for row in ENGINE_FLAGS for p in row.probes for s in p.spellings]
    assert len(spellings) == len(set(spellings)) == len(CANDIDATE_FLAGS)
    # a shared spelling is one its row probes
    for row in ENGINE_FLAGS:
        if row.shared is not None and row.probes:
            probed = {s for p in row.probes for s in p.spellings}
            assert set(row.shared.spellings) <= probed, row.option


def test_the_shared_spellings_are_the_rows() -> None:
    assert dict(SHARED_SPELLINGS) == {
        row.option: row.shared for row in ENGINE_FLAGS if row.option and row.shared
    }
    assert SHARED_SPELLINGS[Option.CTX].spellings == ("-c", "--ctx-size")


@pytest.mark.parametrize("module_name", ["upstream", "ik"])
def test_a_profile_spells_only_options_of_the_rows_it_may_probe(module_name: str) -> None:
    module = importlib.import_module(f"mtpstudio.core.engines.profiles.{module_name}")
    rows = {row.option: row for row in ENGINE_FLAGS}
    for option, spelling in module.SPELLINGS.items():
        row = rows[option]
        probed = {s for p in row.probes for s in p.spellings} | FILE_PROBED_FLAGS
        assert set(spelling.spellings) <= probed, (module_name, option)
