"""Services of a running job: monitor, web page and its port, control endpoint, listeners, progress."""
