"""The in-process host: every task of a job runs in this process under the job driver."""
