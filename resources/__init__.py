"""Icons, launcher, metainfo, prompts and catalogue data (mtpstudio.resources)."""
