"""The functions each engine refuses in a read: they write, or reach outside the database.

sqlfeed runs a query's partitions once or more each (a retried or redelivered partition
runs again), on connections of its own: a function that writes would write once per
partition and per retry, one that reaches outside the database (another server, the
server's files, a large object that outlives the read) escapes the read-only transaction
the read runs in. Such calls are refused before anything runs, unless the user opts in
(``--allow-side-effects``; ``parse(..., allow_side_effects=True)``).

Each table maps a function name (lower case) or a family (``dblink*``: every name that
starts so) to what it does, for the error and the docs' table. A dialect names its table in
:attr:`~sqlfeed.dialects.Dialect.SIDE_EFFECT_FUNCTIONS`; :func:`side_effect` looks a name up.
Statements that write (``COPY``, ``EXPORT DATABASE``, ``LOAD DATA``, ``SELECT ... INTO
OUTFILE``) are refused with every statement that is not a query.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["DUCKDB", "GENERIC", "MYSQL", "POSTGRES", "SQLITE", "TSQL", "side_effect"]

SideEffects = Mapping[str, str]
"""Function name, or family ending in ``*``, -> what calling it does."""


def _table(groups: Mapping[str, str]) -> SideEffects:
    """One entry per name of each space-separated group of names."""
    return MappingProxyType(
        {name: does for names, does in groups.items() for name in names.split()}
    )


POSTGRES = _table(
    {
        "dblink*": "connects to a database, where it runs any statement (dblink_exec, or a "
        "DELETE sent through dblink) outside the read-only transaction",
        "lo_create lo_creat lo_from_bytea lo_import lo_export lo_unlink lo_put lo_truncate "
        "lo_truncate64 lo_open lowrite": "creates, writes or deletes large objects (allowed "
        "in a read-only transaction), or copies them to or from the server's files",
        "pg_file_write pg_file_rename pg_file_unlink pg_file_sync pg_file_read pg_file_length "
        "pg_logdir_ls": "writes or reads the server's files (adminpack)",
        "pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file pg_ls_logdir pg_ls_waldir "
        "pg_ls_tmpdir pg_ls_archive_statusdir pg_ls_logicalsnapdir pg_ls_logicalmapdir "
        "pg_ls_replslotdir": "reads the server's file system",
        "query_to_xml query_to_xmlschema query_to_xml_and_xmlschema cursor_to_xml "
        "cursor_to_xmlschema ts_stat": "runs SQL text that sqlfeed cannot check",
        "nextval setval set_config": "advances a sequence or changes a setting",
        "pg_advisory_lock pg_advisory_lock_shared pg_advisory_xact_lock "
        "pg_advisory_xact_lock_shared pg_try_advisory_lock pg_try_advisory_lock_shared "
        "pg_try_advisory_xact_lock pg_try_advisory_xact_lock_shared pg_advisory_unlock "
        "pg_advisory_unlock_shared pg_advisory_unlock_all pg_sleep pg_sleep_for "
        "pg_sleep_until": "takes or releases locks, or waits",
        "pg_terminate_backend pg_cancel_backend pg_reload_conf pg_rotate_logfile "
        "pg_create_restore_point pg_switch_wal pg_promote pg_backup_start pg_backup_stop "
        "pg_start_backup pg_stop_backup pg_wal_replay_pause pg_wal_replay_resume "
        "pg_log_backend_memory_contexts pg_stat_reset pg_stat_reset_shared "
        "pg_stat_reset_single_table_counters pg_stat_reset_single_function_counters "
        "pg_stat_reset_slru pg_stat_reset_replication_slot pg_stat_reset_subscription_stats "
        "pg_import_system_collations pg_notify pg_logical_emit_message": "acts on the server "
        "(other sessions, configuration, WAL, statistics, notifications)",
        "pg_create_physical_replication_slot pg_create_logical_replication_slot "
        "pg_drop_replication_slot pg_copy_physical_replication_slot "
        "pg_copy_logical_replication_slot pg_replication_slot_advance "
        "pg_logical_slot_get_changes pg_logical_slot_get_binary_changes "
        "pg_replication_origin_create pg_replication_origin_drop "
        "pg_replication_origin_advance pg_replication_origin_session_setup "
        "pg_replication_origin_session_reset pg_replication_origin_xact_setup": "creates, "
        "consumes or drops replication state",
    }
)
"""PostgreSQL (extensions included: dblink, adminpack)."""

MYSQL = _table(
    {
        "load_file": "reads a file of the server",
        "sys_exec sys_eval": "runs a command on the server (lib_mysqludf_sys)",
        "nextval setval": "advances a sequence (MariaDB)",
        "get_lock release_lock release_all_locks": "takes or releases a named lock",
        "sleep benchmark master_pos_wait source_pos_wait master_gtid_wait "
        "wait_for_executed_gtid_set wait_until_sql_thread_after_gtids": "waits, or burns the "
        "server's time",
    }
)
"""MySQL and MariaDB (``SELECT ... INTO OUTFILE`` is refused as ``INTO``)."""

SQLITE = _table(
    {
        "load_extension": "loads native code into the reading process",
        "writefile": "writes a file (the fileio extension, the sqlite3 shell)",
        "readfile fsdir lsdir": "reads the file system (the fileio extension)",
        "edit": "starts an editor (the sqlite3 shell)",
        "fts3_tokenizer": "registers a tokenizer by its address",
    }
)
"""SQLite (with the extensions a connection may have loaded)."""

DUCKDB = _table(
    {
        "checkpoint force_checkpoint": "writes the database file",
        "enable_profiling disable_profiling enable_logging disable_logging "
        "truncate_duckdb_logs write_log": "changes profiling or logging (profiling writes its "
        "output file)",
        "query query_table json_execute_serialized_sql": "runs SQL text that sqlfeed cannot check",
        "nextval setval setseed": "advances a sequence or changes the random seed",
        "sleep_ms": "waits",
    }
)
"""DuckDB (``COPY ... TO`` and ``EXPORT DATABASE``, which write files, are statements)."""

TSQL = _table(
    {
        "xp_cmdshell": "runs a command on the server",
        "openrowset opendatasource openquery": "reads another server or the server's files",
    }
)
"""SQL Server."""

GENERIC = MappingProxyType({**POSTGRES, **MYSQL, **SQLITE, **DUCKDB, **TSQL})
"""The engines without a table of their own: every table's names (a query planned for an
engine sqlfeed does not read natively refuses every function known to write)."""


def side_effect(table: SideEffects, function: str) -> str | None:
    """What calling ``function`` does, when ``table`` lists it or its family; else None.

    >>> side_effect(POSTGRES, "dblink_connect_u")  # doctest: +ELLIPSIS
    'connects to a database, where it runs any statement ...'
    >>> side_effect(POSTGRES, "lo_get") is None
    True
    """
    name = function.lower()
    if name in table:
        return table[name]
    for entry, does in table.items():
        if entry.endswith("*") and name.startswith(entry[:-1]):
            return does
    return None
