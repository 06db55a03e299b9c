"""The launcher and the AppStream metainfo pass the real validators and agree with each other."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

from mtpstudio.helper import constants

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "io.github.mtpstudio"
DESKTOP = ROOT / "resources" / f"{APP_ID}.desktop"
METAINFO = ROOT / "resources" / f"{APP_ID}.metainfo.xml"
SCREENSHOT_BASE = "https://raw.githubusercontent.com/mtpstudio/mtpstudio/main/docs/"


def validator(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: scripts/test installs it (desktop-file-utils, appstream)"
    return path


def desktop_file_validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [validator("desktop-file-validate"), str(path)], capture_output=True, text=True
    )


def appstream_validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [validator("appstreamcli"), "validate", "--no-net", "--pedantic", str(path)],
        capture_output=True,
        text=True,
    )


def desktop_entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return dict(parser["Desktop Entry"])


def test_desktop_file_validate_passes_on_the_launcher() -> None:
    result = desktop_file_validate(DESKTOP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " error: " not in result.stdout + result.stderr


def test_desktop_file_validate_rejects_a_broken_launcher(tmp_path: Path) -> None:
    broken = tmp_path / f"{APP_ID}.desktop"
    broken.write_text(DESKTOP.read_text().replace("Type=Application\n", ""))
    result = desktop_file_validate(broken)
    assert result.returncode != 0
    assert "Type" in result.stdout + result.stderr


def test_the_launcher_names_the_app_its_icon_and_its_menu() -> None:
    entry = desktop_entry(DESKTOP)
    assert entry["Type"] == "Application"
    assert entry["Categories"] == "System;Settings;"
    assert entry["Icon"] == APP_ID
    assert entry["Exec"].split()[0] == entry["TryExec"] == "mtpstudio"
    assert entry["Exec"].split()[1:] == ["gui"]
    assert entry["Terminal"] == "false"


def test_appstreamcli_validate_passes_on_the_metainfo() -> None:
    result = appstream_validate(METAINFO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation was successful" in result.stdout


def test_appstreamcli_rejects_relative_screenshot_urls(tmp_path: Path) -> None:
    relative = tmp_path / f"{APP_ID}.metainfo.xml"
    relative.write_text(METAINFO.read_text().replace(SCREENSHOT_BASE, "docs/"))
    result = appstream_validate(relative)
    assert result.returncode != 0
    assert "web-url-expected" in result.stdout


def metainfo() -> ET.Element:
    return ET.parse(METAINFO).getroot()


def test_the_metainfo_launches_the_launcher_and_shares_the_policys_namespace() -> None:
    root = metainfo()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable[@type='desktop-id']") == DESKTOP.name
    assert root.findtext("icon[@type='stock']") == desktop_entry(DESKTOP)["Icon"]
    assert constants.POLICY_ACTION_ID.startswith(APP_ID + ".")
    assert root.findtext("provides/binary") == desktop_entry(DESKTOP)["TryExec"]


def test_every_screenshot_in_docs_is_listed_by_an_https_url() -> None:
    images = [image.text or "" for image in metainfo().iter("image")]
    for url in images:
        assert urlparse(url).scheme == "https", url
        assert url.startswith(SCREENSHOT_BASE), url
    listed = [url.removeprefix(SCREENSHOT_BASE) for url in images]
    assert listed == sorted(path.name for path in (ROOT / "docs").glob("*.png"))
    captions = [shot.findtext("caption") for shot in metainfo().iter("screenshot")]
    assert all(captions) and len(captions) == len(images)
