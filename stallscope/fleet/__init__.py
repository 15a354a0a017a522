"""Fleet mode (issue 15): many replicas' logs and traces, one shard each (replica x window), analysed by exactly
the code that analyses one incident, as Ray tasks or in-process, into a Hive-partitioned Parquet lake.

Modules: `shards` (SOURCE directories and manifests, windows, content hashes), `execute` (one shard's analysis,
the local and Ray engines, retries), `lake` (declared table schemas, atomic partitions, the `_shards` ledger),
`simulate` (a simulated fleet for tests and benches), `rollup` (a lake's fleet_*.sql views into the fleet object),
`report` (the fleet page), `cli` (`stallscope fleet ...`). See docs/fleet.md.
"""
