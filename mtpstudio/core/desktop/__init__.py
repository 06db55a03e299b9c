"""Desktop VRAM reclaim: options, session files, installs through the helper, the check."""
