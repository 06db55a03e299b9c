"""Quoting for the files mtpstudio writes, one module per syntax: systemd unit files
(``systemd``), the environment files systemd reads (``env_file``), bash (``shell``) and
.desktop entries (``desktop_entry``); ``checks`` holds what every syntax refuses.

Writers turn a value into text for one format and raise ``RenderError`` for values that
format cannot hold (newlines and other control characters, text that is not UTF-8). Readers
are the formats' own rules written out (systemd.syntax(7) "Quoting", systemd.service(5)
"Command lines", systemd's ``parse_env_file``, the freedesktop Desktop Entry spec "The Exec
key"); the renderers use them to check what they wrote, tests use them for round trips.

The privileged helper imports these modules (and ``core.atomic``) only: the standard library
and ``core.errors`` are all they import.
"""

from mtpstudio.core.errors import RenderError

__all__ = ["RenderError"]
