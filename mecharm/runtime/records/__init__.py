"""What a trial leaves behind: the run log, the JSONL decision trace and the ledger row."""
