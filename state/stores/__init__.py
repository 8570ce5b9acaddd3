"""The state stores: memory, RocksDB, JDBC, checkpoint locations and executor-local copies."""
