"""Every per-user path mtpstudio uses (XDG config, cache, state and data), chosen in one place."""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_cache_dir, user_config_dir, user_data_dir, user_state_dir

APP = "mtpstudio"


def config_home() -> Path:
    """``$XDG_CONFIG_HOME`` (``~/.config``): systemd user units live below it."""
    return Path(user_config_dir())


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/mtpstudio``: settings, the API key file, user env files."""
    return Path(user_config_dir(APP))


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mtpstudio``: engine probes, catalogue model headers."""
    return Path(user_cache_dir(APP))


def state_dir() -> Path:
    """``$XDG_STATE_HOME/mtpstudio``: running servers, their logs, install manifests."""
    return Path(user_state_dir(APP))


def data_home() -> Path:
    """``$XDG_DATA_HOME`` (``~/.local/share``)."""
    return Path(user_data_dir())


def data_dir() -> Path:
    """``$XDG_DATA_HOME/mtpstudio``: exported files, benchmark history, measurements."""
    return Path(user_data_dir(APP))


def user_unit_dir() -> Path:
    """Where systemd looks for a user's own units: ``$XDG_CONFIG_HOME/systemd/user``."""
    return config_home() / "systemd" / "user"


def models_dir() -> Path:
    """``$XDG_DATA_HOME/mtpstudio/models``: downloaded models, one folder per repository."""
    return data_dir() / "models"
