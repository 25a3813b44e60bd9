"""Widgets of the app's screens, one per module with its default CSS."""
