//! [`EtcdStore`]: lock-core's [`RevisionStore`] over etcd-client, one request per method.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use futures_util::stream::{self, BoxStream, StreamExt};
use lock_core::backend::{Change, Enqueued, Entry, Lease, LeaseId, Order, Range, Revision, RevisionStore};
use lock_core::{LockError, Result};

use crate::endpoints;
use crate::error::mapped;

/// The default bound on connecting (and on the probe that finds the server's smallest lease).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`RevisionStore`] on an etcd cluster (or one member): the store under
/// [`RevisionLock`](lock_core::revision::RevisionLock) and
/// [`RevisionElection`](lock_core::revision::RevisionElection).
///
/// ```no_run
/// use lock_core::revision::RevisionLock;
/// use lock_core::LockOptions;
/// use std::time::Duration;
///
/// # async fn run() -> lock_core::Result<()> {
/// let store = lock_etcd::EtcdStore::connect(&["127.0.0.1:2379"]).await?;
/// let lock = RevisionLock::new(store);
/// let guard = lock.acquire("reports/daily", &LockOptions::new(Duration::from_secs(10))).await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    /// `host:port`, comma-separated: what errors name.
    endpoints: String,
    /// The server's smallest lease, found at connect.
    min_ttl: Duration,
    /// How many times a request that could not be sent is tried (twice per endpoint).
    tries: usize,
}

impl std::fmt::Debug for EtcdStore {
    // The client's options hold the password: none of it is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("endpoints", &self.endpoints).field("min_ttl", &self.min_ttl).finish()
    }
}

impl EtcdStore {
    /// Connects to `endpoints` (`host:port` or `http(s)://host:port`), with no credential.
    ///
    /// # Errors
    /// As [`EtcdStoreBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn connect<E: AsRef<str>>(endpoints: &[E]) -> Result<Self> {
        EtcdStoreBuilder::new(endpoints).connect().await
    }

    /// A builder, for credentials, TLS and timeouts.
    pub fn builder<E: AsRef<str>>(endpoints: &[E]) -> EtcdStoreBuilder {
        EtcdStoreBuilder::new(endpoints)
    }

    /// The etcd client (a clone shares its connections), for what this crate does not wrap.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn kv(&self) -> Client {
        self.client.clone()
    }

    /// One transaction, sent as [`send`](Self::send) sends every request (an unsent one retried on another
    /// endpoint), its error mapped.
    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.send(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map_err(mapped)
    }

    /// Sends one request, and sends it again (to another endpoint, as the client balances them) while it could not
    /// even be sent: a connection refused by a member that is down means nothing reached etcd, so any request may
    /// be retried, and a cluster with a dead member still answers. At most twice per endpoint, 10 ms apart.
    async fn send<T, F, Fut>(&self, request: F) -> std::result::Result<T, etcd_client::Error>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let mut tries = self.tries;
        loop {
            match request(self.kv()).await {
                Err(err) if tries > 1 && unsent(&err) => {
                    tries -= 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                answered => return answered,
            }
        }
    }
}

/// Whether `err` says the request never left: a connection that could not be made.
fn unsent(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable && status.message().contains("tcp connect error")
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// How to connect an [`EtcdStore`].
#[derive(Clone)]
pub struct EtcdStoreBuilder {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    #[cfg(feature = "tls")]
    tls: Option<etcd_client::TlsOptions>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for EtcdStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStoreBuilder")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl EtcdStoreBuilder {
    /// Endpoints, no credential, no TLS, [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn new<E: AsRef<str>>(endpoints: &[E]) -> Self {
        EtcdStoreBuilder {
            endpoints: endpoints.iter().map(|e| e.as_ref().to_owned()).collect(),
            user: None,
            #[cfg(feature = "tls")]
            tls: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Authenticates as `user` (etcd's user/password auth; the password is never shown).
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Connects with TLS (`https://` endpoints): a custom CA, a client certificate (`Identity`), a domain name.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Bounds connecting (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects, and asks the server for its smallest lease (a one-second grant, revoked at once): etcd raises a
    /// shorter TTL silently, so that is what [`RevisionStore::min_ttl`] reports.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the endpoint part that is wrong, before any I/O;
    /// [`LockError::Unavailable`] naming the endpoints when none answers within the connect timeout;
    /// [`LockError::Auth`] for refused credentials; [`LockError::Tls`] for a TLS endpoint without the `tls` feature
    /// or a refused certificate.
    ///
    /// # Cancel safety
    /// Cancel-safe: the client's connections end with it.
    pub async fn connect(self) -> Result<EtcdStore> {
        endpoints::check(&self.endpoints)?;
        let named = endpoints::named(&self.endpoints);
        let connecting: std::pin::Pin<Box<dyn std::future::Future<Output = Result<EtcdStore>> + Send>> =
            Box::pin(self.connect_unlocated(named.clone()));
        connecting.await.map_err(|err| err.at("connect", Some(&named)))
    }

    async fn connect_unlocated(self, named: String) -> Result<EtcdStore> {
        if self.connect_timeout.is_zero() {
            return Err(LockError::invalid("the connect timeout must be positive"));
        }
        let https = self.endpoints.iter().any(|e| e.starts_with("https://"));
        #[cfg(not(feature = "tls"))]
        if https {
            return Err(LockError::tls(TlsNotBuilt));
        }
        let mut options = ConnectOptions::new().with_connect_timeout(self.connect_timeout);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone()).with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = self.tls.clone() {
            options = options.with_tls(tls);
        } else if https {
            options = options.with_tls(etcd_client::TlsOptions::new());
        }
        let bound = self.connect_timeout;
        let connect = Client::connect(&self.endpoints, Some(options));
        let client = match tokio::time::timeout(bound, connect).await {
            Err(_) => return Err(LockError::unavailable(format!("no etcd endpoint answered within {bound:?}"))),
            Ok(connected) => connected.map_err(mapped)?,
        };
        let tries = self.endpoints.len().saturating_mul(2).max(1);
        let store = EtcdStore { client, endpoints: named, min_ttl: Duration::from_secs(1), tries };
        // The probe: the first requests, so an unreachable cluster, missing credentials or a full database fails
        // here, not at the first lock. A read of a key nobody writes (`\0`) needs a user when auth is on (etcd grants
        // leases to anyone); a user without permission on it is fine here: its permissions are on its own keys.
        let probe = async {
            match store.send(|mut c| async move { c.get("\0", None).await }).await {
                Err(etcd_client::Error::GRpcStatus(status)) if status.code() == tonic::Code::PermissionDenied => {}
                Err(err) => return Err(mapped(err)),
                Ok(_) => {}
            }
            let lease = store.grant(Duration::from_secs(1)).await?;
            store.revoke(lease.id).await?;
            Ok::<Duration, LockError>(lease.ttl)
        };
        let min_ttl = match tokio::time::timeout(bound, probe).await {
            Err(_) => return Err(LockError::unavailable(format!("no etcd endpoint answered within {bound:?}"))),
            Ok(probed) => probed?,
        };
        Ok(EtcdStore { min_ttl, ..store })
    }
}

/// The source of the [`LockError::Tls`] for an `https://` endpoint in a build without the `tls` feature.
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
struct TlsNotBuilt;

#[cfg(not(feature = "tls"))]
impl std::fmt::Display for TlsNotBuilt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an https:// etcd endpoint needs lock-etcd's `tls` feature")
    }
}

#[cfg(not(feature = "tls"))]
impl std::error::Error for TlsNotBuilt {}

fn entry(kv: &etcd_client::KeyValue) -> Entry {
    Entry::new(String::from_utf8_lossy(kv.key()), kv.value(), kv.create_revision(), kv.lease())
}

fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map_or(0, etcd_client::ResponseHeader::revision)
}

/// The first key under a queue by revision of creation: etcd's `WithFirstCreate`.
fn first_created() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1)
}

#[async_trait]
impl RevisionStore for EtcdStore {
    fn endpoints(&self) -> Option<&str> {
        Some(&self.endpoints)
    }

    fn min_ttl(&self) -> Duration {
        self.min_ttl
    }

    async fn grant(&self, ttl: Duration) -> Result<Lease> {
        let seconds = i64::try_from(self.ttl_for(ttl).as_secs()).unwrap_or(i64::MAX);
        let granted = self.send(|mut c| async move { c.lease_grant(seconds, None).await }).await.map_err(mapped)?;
        let ttl = Duration::from_secs(granted.ttl().unsigned_abs());
        Ok(Lease::new(granted.id(), ttl))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<bool> {
        // One request on a stream of its own, dropped after the first answer (etcd-client reads it, and refuses a
        // lease the server no longer has).
        match self.send(|mut c| async move { c.lease_keep_alive(lease).await.map(drop) }).await {
            Ok(_) => Ok(true),
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
            Err(err) => Err(mapped(err)),
        }
    }

    async fn time_to_live(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let answer = self.send(|mut c| async move { c.lease_time_to_live(lease, None).await }).await.map_err(mapped)?;
        Ok((answer.ttl() >= 0).then(|| Duration::from_secs(answer.ttl().unsigned_abs())))
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        match self.send(|mut c| async move { c.lease_revoke(lease).await }).await {
            Ok(_) => Ok(()),
            Err(etcd_client::Error::GRpcStatus(status)) if status.message().contains("lease not found") => Ok(()),
            Err(err) => Err(mapped(err)),
        }
    }

    async fn enqueue(&self, key: &str, value: &[u8], lease: LeaseId, queue: &str) -> Result<Enqueued> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
                TxnOp::get(key, None),
                TxnOp::get(queue, Some(first_created())),
            ])
            .or_else([TxnOp::get(key, None), TxnOp::get(queue, Some(first_created()))]);
        let answer = self.txn(txn).await?;
        let created = answer.succeeded();
        let revision = revision_of(answer.header());
        let gets: Vec<etcd_client::GetResponse> = answer
            .op_responses()
            .into_iter()
            .filter_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .collect();
        let [mine, first] = gets.as_slice() else {
            return Err(LockError::backend(format!("etcd answered the enqueue transaction with {} reads", gets.len())));
        };
        let create_revision = mine.kvs().first().map_or(0, etcd_client::KeyValue::create_revision);
        Ok(Enqueued::new(created, create_revision, first.kvs().first().map(entry), revision))
    }

    async fn range(&self, range: Range<'_>) -> Result<(Vec<Entry>, Revision)> {
        let order = match range.order {
            Order::LastCreated => SortOrder::Descend,
            _ => SortOrder::Ascend,
        };
        let mut options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, order);
        if range.limit > 0 {
            options = options.with_limit(i64::try_from(range.limit).unwrap_or(i64::MAX));
        }
        if let Some(max) = range.created_by {
            options = options.with_max_create_revision(max);
        }
        let prefix = range.prefix.to_owned();
        let answer = self
            .send(|mut c| {
                let (prefix, options) = (prefix.clone(), options.clone());
                async move { c.get(prefix, Some(options)).await }
            })
            .await
            .map_err(mapped)?;
        Ok((answer.kvs().iter().map(entry).collect(), revision_of(answer.header())))
    }

    async fn get(&self, key: &str) -> Result<(Option<Entry>, Revision)> {
        let answer = self
            .send(|mut c| {
                let key = key.to_owned();
                async move { c.get(key, None).await }
            })
            .await
            .map_err(mapped)?;
        Ok((answer.kvs().first().map(entry), revision_of(answer.header())))
    }

    async fn put_if_created(&self, key: &str, value: &[u8], created: Revision, lease: LeaseId) -> Result<bool> {
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, created)]).and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
        Ok(self.txn(txn).await?.succeeded())
    }

    async fn delete_if_created(&self, key: &str, created: Revision) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, created)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.txn(txn).await?.succeeded())
    }

    fn watch(&self, key: &str, prefix: bool, from: Revision) -> BoxStream<'static, Result<Change>> {
        let mut options = WatchOptions::new().with_start_revision(from.max(1));
        if prefix {
            options = options.with_prefix();
        }
        let (store, key) = (self.clone(), key.to_owned());
        let opened = async move {
            let watch = |mut c: Client| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.watch(key, Some(options)).await }
            };
            store.send(watch).await.map_err(mapped)
        };
        stream::once(opened)
            .flat_map(|opened| match opened {
                Err(err) => stream::iter(vec![Err(err)]).boxed(),
                Ok(watch) => watch_changes(watch).boxed(),
            })
            .boxed()
    }
}

/// A watch's responses as changes: events in order; a cancellation for a compacted revision as
/// [`Change::Compacted`] (then the stream ends); any other cancellation or a broken stream as its end.
fn watch_changes(watch: etcd_client::WatchStream) -> BoxStream<'static, Result<Change>> {
    stream::unfold(Some(watch), |watch| async move {
        let mut watch = watch?;
        loop {
            match watch.message().await {
                Err(err) => return Some((vec![Err(mapped(err))], None)),
                Ok(None) => return None,
                Ok(Some(answer)) => {
                    if answer.canceled() {
                        if answer.compact_revision() > 0 {
                            let revision = answer.compact_revision();
                            return Some((vec![Ok(Change::Compacted { revision })], None));
                        }
                        let reason = answer.cancel_reason().to_owned();
                        let err = if reason.contains("permission denied") || reason.contains("auth") {
                            LockError::auth(WatchRefused { reason })
                        } else {
                            LockError::unavailable(WatchRefused { reason })
                        };
                        return Some((vec![Err(err)], None));
                    }
                    let revision = revision_of(answer.header());
                    let changes: Vec<Result<Change>> = answer
                        .events()
                        .iter()
                        .filter_map(|event| {
                            let kv = event.kv()?;
                            Some(Ok(match event.event_type() {
                                EventType::Put => Change::Put(entry(kv)),
                                EventType::Delete => Change::Delete {
                                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                                    revision: if kv.mod_revision() > 0 { kv.mod_revision() } else { revision },
                                },
                            }))
                        })
                        .collect();
                    if !changes.is_empty() {
                        return Some((changes, Some(watch)));
                    }
                }
            }
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

/// Why etcd cancelled a watch (other than compaction).
#[derive(Debug)]
struct WatchRefused {
    reason: String,
}

impl std::fmt::Display for WatchRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd cancelled the watch: {}", if self.reason.is_empty() { "no reason given" } else { &self.reason })
    }
}

impl std::error::Error for WatchRefused {}
