"""Export and import of a whole store as JSON Lines (SPEC §8b; the format is in docs/export-import.md).

`format` holds the wire rules shared by both directions, `export` streams a store out in constant memory,
`importer` verifies a file line by line and recreates the store (one transaction for `manage.py
import_store`, a resumable sequence of verified chunks over HTTP).
"""
