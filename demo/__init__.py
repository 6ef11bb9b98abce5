"""The end-to-end demo behind `make demo`: each area adds a part in its own module."""
