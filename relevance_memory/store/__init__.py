"""The append-only message store (SPEC §3 step 1, §10): ingest and validation, read-only
snapshots, supersede detection, the caller's history matched against the store, restore."""
