"""The worker host: a job's tasks run in long-lived worker processes that exchange batches directly."""
