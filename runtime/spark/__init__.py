"""The Spark host: the job driver's rounds run as Spark jobs through PySpark's public API."""
