//! lock-testkit's lock and election cases that hold for any backend, on a real etcd: one member, and a cluster of
//! three (each shared by the cases of its module; every case uses fresh names).

use lock_core::revision::RevisionLock;
use lock_testkit::{EtcdServer, Subject};

async fn subject(etcd: Result<&'static EtcdServer, lock_testkit::ServerError>) -> Subject {
    let etcd = match etcd {
        Ok(etcd) => etcd,
        Err(err) => panic!("etcd: {err}"),
    };
    let store = match lock_etcd::EtcdStore::connect(&etcd.endpoints()).await {
        Ok(store) => store,
        Err(err) => panic!("connecting to etcd: {err:?}"),
    };
    Subject::new(RevisionLock::new(store))
}

mod one_member {
    use super::*;

    lock_testkit::lock_conformance_tests!(tokio, subject(EtcdServer::shared()));
    lock_testkit::leader_tests!(tokio, subject(EtcdServer::shared()));
}

mod three_members {
    use super::*;

    lock_testkit::lock_conformance_tests!(tokio, subject(EtcdServer::shared_cluster()));
    lock_testkit::leader_tests!(tokio, subject(EtcdServer::shared_cluster()));
}
