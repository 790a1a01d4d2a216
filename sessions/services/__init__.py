"""Write use-cases of agent access (SPEC §5), split by resource: `environments`, `sessions`, `work`.

Each service owns its transaction and its locks. Lock order, everywhere: environment row, then store rows
(in pk order), then session rows (in pk order), then work rows (in pk order) — the store-before-work order
is the one every file write through a per-work credential takes (`work.lease_fence`); an environment key
comes after its environment. Rows are re-read under their lock (`common.lock_row`): one deleted meanwhile is
the 404 of a missing one. Leases and claims compare against database time (`common.db_now`,
`statement_timestamp()` read after the row locks are held).
"""
