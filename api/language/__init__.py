"""The pipeline language users write: environments, pipelines, streams, windows, functions, testing kit."""
