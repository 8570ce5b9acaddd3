"""Runtime: dispatcher, task runners, tasks, channels and the executors."""
