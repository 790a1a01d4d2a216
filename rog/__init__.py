"""`rog`: the Memories command-line client (SPEC §8). Talks only to the REST API; prints JSON."""
