//! The fenced-write script on the in-memory store (the same Lua the servers run); the backends' conformance suites
//! run the same rules on Redis and Valkey.

use super::*;
use crate::seam::transport::Call;
use crate::MemoryStore;

fn fence(n: u64) -> FencingToken {
    FencingToken::new(n)
}

async fn raw(store: &MemoryStore, command: &'static str, keys: &[&str], args: &[&str]) -> Reply {
    match store.call(Call::plain("test", command, keys, args)).await {
        Ok(ran) => ran.reply,
        Err(err) => panic!("{command}: {err}"),
    }
}

fn stale(result: Result<impl fmt::Debug>, presented: u64, current: u64) {
    match result {
        Err(LockError::StaleFence { presented: p, current: c }) => assert_eq!((p, c), (presented, current)),
        other => panic!("expected StaleFence {{ {presented}, {current} }}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_fence_below_the_guard_writes_nothing_with_any_write() {
    let store = MemoryStore::new();
    let r = FencedResource::with_guard(store.clone(), "{r}:fence").unwrap();
    r.set(fence(10), "{r}:s", "new").await.unwrap();
    r.hset(fence(10), "{r}:h", &[("f", "new")]).await.unwrap();
    r.rpush(fence(10), "{r}:l", &["new"]).await.unwrap();
    r.incr_by(fence(10), "{r}:n", 5).await.unwrap();
    let id = r.xadd(fence(10), "{r}:x", &[("f", "new")]).await.unwrap();

    stale(r.set(fence(9), "{r}:s", "old").await, 9, 10);
    stale(r.get_set(fence(9), "{r}:s", "old").await, 9, 10);
    stale(r.get(fence(9), "{r}:s").await, 9, 10);
    stale(r.hset(fence(9), "{r}:h", &[("f", "old"), ("g", "old")]).await, 9, 10);
    stale(r.del(fence(9), &["{r}:s", "{r}:h"]).await, 9, 10);
    stale(r.incr_by(fence(9), "{r}:n", 1).await, 9, 10);
    stale(r.rpush(fence(9), "{r}:l", &["old"]).await, 9, 10);
    stale(r.xadd(fence(9), "{r}:x", &[("f", "old")]).await, 9, 10);
    stale(r.observe(fence(1)).await, 1, 10);

    assert_eq!(raw(&store, "GET", &["{r}:s"], &[]).await, Reply::Bulk(b"new".to_vec()));
    assert_eq!(
        raw(&store, "HGETALL", &["{r}:h"], &[]).await,
        Reply::Array(vec![Reply::Bulk(b"f".to_vec()), Reply::Bulk(b"new".to_vec())])
    );
    assert_eq!(raw(&store, "LRANGE", &["{r}:l"], &["0", "-1"]).await, Reply::Array(vec![Reply::Bulk(b"new".to_vec())]));
    assert_eq!(raw(&store, "GET", &["{r}:n"], &[]).await, Reply::Bulk(b"5".to_vec()));
    let entries = Reply::Array(vec![Reply::Array(vec![
        Reply::Bulk(id.into_bytes()),
        Reply::Array(vec![Reply::Bulk(b"f".to_vec()), Reply::Bulk(b"new".to_vec())]),
    ])]);
    assert_eq!(raw(&store, "XRANGE", &["{r}:x"], &["-", "+"]).await, entries);
    assert_eq!(r.current().await.unwrap(), Some(fence(10)));
}

#[tokio::test]
async fn every_write_applies_with_the_newest_fence_and_moves_the_guard() {
    let store = MemoryStore::new();
    let r = FencedResource::with_guard(store.clone(), "{r}:fence").unwrap();
    assert_eq!(r.current().await.unwrap(), None);
    assert_eq!(r.get(fence(3), "{r}:s").await.unwrap(), None, "a read records its fence");
    assert_eq!(r.current().await.unwrap(), Some(fence(3)));
    r.set(fence(3), "{r}:s", "a").await.unwrap();
    r.set(fence(3), "{r}:s", "b").await.unwrap(); // the same holder writes again
    assert_eq!(r.get_set(fence(4), "{r}:s", "c").await.unwrap().as_deref(), Some("b"));
    assert_eq!(r.get_set(fence(4), "{r}:t", "x").await.unwrap(), None);
    assert_eq!(r.get(fence(4), "{r}:s").await.unwrap().as_deref(), Some("c"));
    assert_eq!(r.hset(fence(5), "{r}:h", &[("f", "1"), ("g", "2")]).await.unwrap(), 2);
    assert_eq!(r.hset(fence(5), "{r}:h", &[("f", "3"), ("k", "4")]).await.unwrap(), 1);
    assert_eq!(r.incr_by(fence(6), "{r}:n", 7).await.unwrap(), 7);
    assert_eq!(r.incr_by(fence(6), "{r}:n", -9).await.unwrap(), -2);
    assert_eq!(r.rpush(fence(7), "{r}:l", &["a", "b"]).await.unwrap(), 2);
    assert_eq!(r.rpush(fence(7), "{r}:l", &["c"]).await.unwrap(), 3);
    assert_eq!(r.del(fence(8), &["{r}:s", "{r}:h", "{r}:none"]).await.unwrap(), 2);
    r.observe(fence(9)).await.unwrap();
    assert_eq!(r.current().await.unwrap(), Some(fence(9)));
    stale(r.get(fence(8), "{r}:t").await, 8, 9);
    assert_eq!(raw(&store, "PTTL", &["{r}:fence"], &[]).await, Reply::Int(-1), "the guard never expires");
}

/// Lua's numbers are doubles: 2^53 + 1 and 2^53 are one number to it. The guard compares decimal strings.
#[tokio::test]
async fn fences_compare_exactly_beyond_what_a_double_holds() {
    let store = MemoryStore::new();
    let r = FencedResource::with_guard(store, "{r}:fence").unwrap();
    let big = 1u64 << 53;
    r.set(fence(big + 1), "{r}:s", "new").await.unwrap();
    stale(r.set(fence(big), "{r}:s", "old").await, big, big + 1);
    r.set(fence(u64::MAX), "{r}:s", "max").await.unwrap();
    stale(r.set(fence(u64::MAX - 1), "{r}:s", "old").await, u64::MAX - 1, u64::MAX);
    stale(r.set(fence(9), "{r}:s", "short").await, 9, u64::MAX);
    assert_eq!(r.current().await.unwrap(), Some(fence(u64::MAX)));
}

/// A script is not rolled back: the write runs before the guard moves, so a write the server refuses leaves the
/// guard where it was.
#[tokio::test]
async fn a_write_the_server_refuses_leaves_the_guard_unchanged() {
    let store = MemoryStore::new();
    let r = FencedResource::with_guard(store.clone(), "{r}:fence").unwrap();
    r.set(fence(4), "{r}:s", "not a number").await.unwrap();
    assert!(r.incr_by(fence(5), "{r}:s", 1).await.is_err());
    raw(&store, "HSET", &["{r}:h"], &["f", "v"]).await;
    match r.set(fence(6), "{r}:h", "x").await {
        Ok(()) => {} // SET replaces a value of any type, as on Redis
        Err(err) => panic!("SET over a hash: {err}"),
    }
    raw(&store, "HSET", &["{r}:h2"], &["f", "v"]).await;
    match r.rpush(fence(7), "{r}:h2", &["x"]).await {
        Err(LockError::WrongType { key, .. }) => assert_eq!(key, "{r}:h2"),
        other => panic!("RPUSH on a hash: {other:?}"),
    }
    assert_eq!(r.current().await.unwrap(), Some(fence(6)), "a refused write moved the guard");
}

#[tokio::test]
async fn a_guard_that_holds_no_fence_is_wrongtype_naming_it() {
    let store = MemoryStore::new();
    raw(&store, "HSET", &["{r}:hash-guard"], &["f", "v"]).await;
    raw(&store, "SET", &["{r}:text-guard"], &["twelve"]).await;
    for guard in ["{r}:hash-guard", "{r}:text-guard"] {
        let r = FencedResource::with_guard(store.clone(), guard).unwrap();
        match r.set(fence(1), "{r}:s", "x").await {
            Err(LockError::WrongType { key, .. }) => assert_eq!(key, guard),
            other => panic!("{guard}: {other:?}"),
        }
        assert!(matches!(r.current().await, Err(LockError::WrongType { .. })), "{guard}");
    }
    assert_eq!(raw(&store, "GET", &["{r}:s"], &[]).await, Reply::Nil, "written past a broken guard");
}

#[tokio::test]
async fn bad_input_is_refused_before_any_io() {
    let store = MemoryStore::new();
    assert!(matches!(FencedResource::with_guard(store.clone(), ""), Err(LockError::InvalidArgument(_))));
    let long = "k".repeat(MAX_KEY + 1);
    assert!(matches!(FencedResource::with_guard(store.clone(), &long), Err(LockError::InvalidArgument(_))));
    let r = FencedResource::with_guard(store.clone(), "g").unwrap();
    let too_many: Vec<&str> = vec!["v"; MAX_ITEMS + 1];
    let bad = [
        r.set(fence(1), "", "v").await,
        r.set(fence(1), &long, "v").await,
        r.set(fence(1), "g", "v").await.map(drop),
        r.del(fence(1), &[]).await.map(drop),
        r.del(fence(1), &["a", "g"]).await.map(drop),
        r.rpush(fence(1), "l", &[]).await.map(drop),
        r.rpush(fence(1), "l", &too_many).await.map(drop),
        r.hset(fence(1), "h", &[]).await.map(drop),
        r.xadd(fence(1), "x", &[]).await.map(drop),
        r.xadd(fence(1), "g", &[("f", "v")]).await.map(drop),
    ];
    for (i, result) in bad.into_iter().enumerate() {
        assert!(matches!(result, Err(LockError::InvalidArgument(_))), "case {i}: {result:?}");
    }
    assert_eq!(r.current().await.unwrap(), None, "a refused input reached the store");
    assert_eq!(r.rpush(fence(1), "l", &too_many[1..]).await.unwrap(), MAX_ITEMS as u64);
}

#[test]
fn the_debug_form_names_the_guard() {
    let r = FencedResource::with_guard(MemoryStore::new(), "{orders}:fence").unwrap();
    let text = format!("{r:?}");
    assert!(text.contains("{orders}:fence"), "{text}");
}

/// A read-modify-write of a hash reads through the guard (issue 56): `hget` and `hgetall` record the fence, so an
/// older holder can no longer change what a newer one read, and a stale read is refused; `new` takes a data key and
/// writes under the guard every language derives for it (WIRE.md 16.1).
#[tokio::test]
async fn hash_reads_record_the_fence_under_the_derived_guard() {
    let store = MemoryStore::new();
    let items = FencedResource::new(store.clone(), "{cart}:items").unwrap();
    assert_eq!(items.guard(), "{cart}:fence");
    items.hset(fence(3), "{cart}:items", &[("sku-1", "2"), ("sku-2", "5")]).await.unwrap();
    assert_eq!(items.hget(fence(4), "{cart}:items", "sku-1").await.unwrap().as_deref(), Some("2"));
    assert_eq!(items.hget(fence(4), "{cart}:items", "none").await.unwrap(), None);
    stale(items.hset(fence(3), "{cart}:items", &[("sku-1", "9")]).await, 3, 4);
    let mut all = items.hgetall(fence(5), "{cart}:items").await.unwrap();
    all.sort();
    assert_eq!(all, [("sku-1".to_owned(), "2".to_owned()), ("sku-2".to_owned(), "5".to_owned())]);
    stale(items.hgetall(fence(4), "{cart}:items").await, 4, 5);
    stale(items.hget(fence(4), "{cart}:items", "sku-1").await, 4, 5);
    assert_eq!(raw(&store, "GET", &["{cart}:fence"], &[]).await, Reply::Bulk(b"5".to_vec()));
    assert!(items.hgetall(fence(5), "{cart}:missing").await.unwrap().is_empty());
    // A key of another type is the store's WRONGTYPE, naming it; nothing moves.
    items.set(fence(5), "{cart}:s", "x").await.unwrap();
    assert!(matches!(items.hgetall(fence(6), "{cart}:s").await, Err(LockError::WrongType { .. })));
    assert_eq!(raw(&store, "GET", &["{cart}:fence"], &[]).await, Reply::Bulk(b"5".to_vec()));
    // No guard derives from a key with a `}` but no hash tag: named ones only.
    assert!(matches!(FencedResource::new(store.clone(), "a}b"), Err(LockError::InvalidArgument(_))));
    assert!(FencedResource::with_guard(store, "a}b:guard").is_ok());
}
