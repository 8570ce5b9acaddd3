"""Runtime: the job driver and host protocol, the dataflow inside tasks, and the in-process and Spark hosts."""
