"""Runtime: the job driver and host protocol, the dataflow inside tasks, the in-process and Spark hosts."""
