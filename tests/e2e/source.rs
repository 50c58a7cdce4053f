//! The Postgres replication source against a real throwaway server.

use crate::harness::postgres::PgCluster;

#[test]
fn harness_starts_a_logical_cluster_with_odd_settings() {
    let mut pg = PgCluster::start();
    assert_eq!(pg.psql("SHOW wal_level"), "logical");
    assert_eq!(pg.psql("SHOW TimeZone"), "America/New_York");
    assert_eq!(pg.psql("SHOW DateStyle"), "SQL, DMY");
    pg.psql("CREATE TABLE t (id int primary key)");
    pg.restart();
    assert_eq!(pg.psql("SELECT count(*) FROM t"), "0");
    let data = pg.data_dir();
    drop(pg);
    assert!(!data.exists(), "the cluster directory is removed on drop");
}
