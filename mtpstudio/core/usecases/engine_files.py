"""An engine binary the user names: probing that one file (its flavour and what the build can
do), and, when none is installed, the steps to build one on this distribution.

`mtpstudio plan --engine-binary` and the GUI's engine picker enter the engines room here.
"""

from __future__ import annotations

from mtpstudio.core.detect.engines import probe_engine_file
from mtpstudio.core.distro import read_os_release
from mtpstudio.core.engines.build_hint import build_steps
from mtpstudio.core.runner import SubprocessRunner

__all__ = ["SubprocessRunner", "build_steps", "probe_engine_file", "read_os_release"]
