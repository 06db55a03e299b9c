"""Custom widgets of the wizard."""
