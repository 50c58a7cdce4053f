//! Postgres logical replication: the replication connection, pgoutput
//! decoding, type mapping, slot and publication management.
