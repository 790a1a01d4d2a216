"""memories-worker: the self-hosted worker (SPEC §5 "The self-hosted worker")."""
