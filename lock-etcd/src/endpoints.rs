//! etcd endpoints as users write them (`host:port`, `http://host:port`, `https://host:port`, comma-separated in
//! `ETCD_ENDPOINTS`), checked part by part before any I/O, and named in errors without a credential.

use lock_core::{LockError, Result};

/// The schemes an endpoint may have.
const SCHEMES: &[&str] = &["http", "https"];

/// The endpoints in `list` (a comma-separated list, as `ETCD_ENDPOINTS` holds), trimmed, empty ones skipped.
///
/// ```
/// let endpoints = lock_etcd::endpoints::parse(" 10.0.0.7:2379, https://etcd-2:2379 ")?;
/// assert_eq!(endpoints, ["10.0.0.7:2379", "https://etcd-2:2379"]);
/// assert!(lock_etcd::endpoints::parse("10.0.0.7:99999").is_err());
/// # Ok::<(), lock_core::LockError>(())
/// ```
///
/// # Errors
/// [`LockError::InvalidArgument`] naming the endpoint part that is wrong (scheme, host, port), or saying the list is
/// empty.
pub fn parse(list: &str) -> Result<Vec<String>> {
    let endpoints: Vec<String> = list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
    check(&endpoints)?;
    Ok(endpoints)
}

/// Checks every endpoint (see [`parse`]).
///
/// # Errors
/// As [`parse`].
pub fn check<E: AsRef<str>>(endpoints: &[E]) -> Result<()> {
    if endpoints.is_empty() {
        return Err(LockError::invalid("no etcd endpoint given (as in 127.0.0.1:2379)"));
    }
    for endpoint in endpoints {
        let endpoint = endpoint.as_ref();
        let url = if endpoint.contains("://") { endpoint.to_owned() } else { format!("http://{endpoint}") };
        lock_core::backend::server_url::check(&url, SCHEMES).map_err(|err| match err {
            LockError::InvalidArgument(words) => {
                LockError::invalid(words.replace("the server URL's", "the etcd endpoint's"))
            }
            other => other,
        })?;
        if url.contains('@') {
            return Err(LockError::invalid(
                "an etcd endpoint holds no credential: pass the user and password with EtcdStoreBuilder::with_user",
            ));
        }
    }
    Ok(())
}

/// The endpoints as errors name them: `host:port`, comma-separated (schemes dropped; they hold no credential).
pub(crate) fn named<E: AsRef<str>>(endpoints: &[E]) -> String {
    endpoints
        .iter()
        .map(|e| {
            let e = e.as_ref();
            e.split_once("://").map_or(e, |(_, rest)| rest).trim_end_matches('/').to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wrong_part_is_named() {
        for (list, part) in [
            ("", "no etcd endpoint"),
            ("ftp://h:2379", "scheme \"ftp\""),
            ("h:notaport", "port notaport"),
            ("h:0", "port 0"),
            ("http://:2379", "host is missing"),
            ("http://user:secret@h:2379", "holds no credential"),
        ] {
            let err = parse(list).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(part), "{list}: {err}");
            assert!(!err.contains("secret"), "{list}: {err}");
        }
        assert_eq!(named(&["http://a:1/", "b:2"]), "a:1,b:2");
    }
}
