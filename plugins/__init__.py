"""tuneup's built-in plugins (probe stages and trainer adapters).

Installed as the import package ``tuneup_plugins``; they register through the
same entry points a third-party package would use.
"""
