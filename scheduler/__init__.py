"""Scheduler: cycle state machines, events and window bookkeeping; no I/O."""
