"""Builds a class-data archive for the Spark driver JVMs the test suite starts, and prints its path.

The suite starts a few hundred Spark driver JVMs (one per job run in a process of its own); most of
their start-up CPU goes to loading and verifying the same few thousand classes. A dynamic class-data
sharing archive (Java 17's ``-XX:ArchiveClassesAtExit``) made once from a small Spark job lets every
later JVM map those classes instead: about 40% less CPU per start here. The archive depends on the
exact Java build, Spark jars and JVM options, so its name carries them; a JVM that cannot use it
falls back to loading classes normally (``-Xshare:auto``), so a stale archive costs nothing but time.

Usage: python scripts/spark_class_archive.py CACHE_DIR JVM_OPTIONS  (prints the archive's path, or
nothing when it could not be made).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").getOrCreate()
sc = spark.sparkContext
pairs = sc.parallelize([(i % 7, i) for i in range(100)], 2).partitionBy(2)
sc.union([pairs.mapPartitions(lambda rows: [sum(v for _, v in rows)]), sc.parallelize([0], 1)]).collect()
spark.stop()
"""


def _java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return done.stderr.strip()


def archive_path(cache: Path, options: str) -> Path:
    """Where the archive for this Java, this Spark and these JVM options lives."""
    import pyspark

    jars = sorted(os.listdir(Path(pyspark.__file__).parent / "jars"))
    key = hashlib.sha256("\n".join([_java_version(), pyspark.__version__, options, *jars])
                         .encode()).hexdigest()[:16]
    return cache / f"spark-driver-{key}.jsa"


def main() -> int:
    cache, options = Path(sys.argv[1]), sys.argv[2]
    target = archive_path(cache, options)
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=cache)) / "archive.jsa"
        env = {**os.environ, "PYSPARK_SUBMIT_ARGS":
               f"--driver-java-options '{options} -XX:ArchiveClassesAtExit={partial} "
               f"-Xlog:cds=off -Xlog:cds+dynamic=off' pyspark-shell"}
        subprocess.run([sys.executable, "-c", _JOB], env=env, capture_output=True, check=False,
                       timeout=300)
        if partial.exists() and partial.stat().st_size > 0:
            partial.replace(target)
        partial.parent.rmdir() if not partial.exists() else None
    if target.exists():
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
