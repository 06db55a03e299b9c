"""The app's own files: written atomically (a crash leaves the old file or the new one, never
half), and read back with limits, a damaged one set aside rather than trusted.

Light: the standard library and core.errors only, so a command may import it when it registers.
"""

from __future__ import annotations

from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.state_files import SchemaError, load_cache, set_aside

__all__ = ["SchemaError", "load_cache", "set_aside", "write_text_atomic"]
