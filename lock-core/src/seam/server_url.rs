//! What is wrong with a server URL, named by its part: a backend checks a URL with [`check`] before handing it to its
//! client, whose own parse errors say only that it "did not parse" (redis-rs) or name an internal kind
//! (`RelativeUrlWithoutBase`, fred).
//!
//! ```
//! use lock_core::backend::server_url::check;
//! const SCHEMES: &[&str] = &["redis", "rediss"];
//! assert!(check("redis://:secret@10.0.0.7:6379/2", SCHEMES).is_ok());
//! let err = check("redis://10.0.0.7:637900", SCHEMES).unwrap_err().to_string();
//! assert!(err.contains("port 637900"), "{err}");
//! let err = check("redis//10.0.0.7", SCHEMES).unwrap_err().to_string();
//! assert!(err.contains("scheme"), "{err}");
//! ```

use crate::error::{LockError, Result};

/// Checks the parts of `url` a client needs: a scheme among `schemes` (compared in lower case), a host, a port from
/// 1 to 65535 when one is given, and a database number when a path is given. The password, if any, is never in the
/// error.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming the part that is wrong and what was expected.
pub fn check(url: &str, schemes: &[&str]) -> Result<()> {
    let bad = |part: &str, why: String| Err(LockError::invalid(format!("the server URL's {part} {why}")));
    let mut expected = schemes.iter().take(4).map(|s| format!("{s}://")).collect::<Vec<_>>().join(", ");
    if schemes.len() > 4 {
        expected.push_str(", …");
    }
    let Some((scheme, rest)) = url.trim().split_once("://") else {
        return bad("scheme", format!("is missing: expected one of {expected} (as in redis://host:6379)"));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !schemes.contains(&scheme.as_str()) {
        return bad("scheme", format!("{scheme:?} is not one of {expected}"));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    // Credentials end at the last `@` (a password may contain one); they are never repeated.
    let address = authority.rsplit_once('@').map_or(authority, |(_, address)| address);
    let (host, port) = if let Some(bracketed) = address.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return bad("host", "opens an IPv6 address with [ and does not close it with ]".to_owned());
        };
        match after {
            "" => (host, None),
            port => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return bad("host", format!("[{host}] is followed by {port:?}, not :port")),
            },
        }
    } else {
        match address.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    if host.is_empty() && scheme.ends_with("unix") {
        return Ok(());
    }
    if host.is_empty() {
        return bad("host", "is missing (as in redis://host:6379)".to_owned());
    }
    if let Some(port) = port {
        let valid = port.parse::<u32>().ok().filter(|p| (1..=65_535).contains(p));
        if valid.is_none() {
            return bad("port", format!("{port} is not a number from 1 to 65535"));
        }
    }
    let db = path.split(['?', '#']).next().unwrap_or_default().trim_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return bad("database", format!("{db:?} (the path) is not a database number"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMES: &[&str] = &["redis", "rediss", "valkey", "valkeys"];

    fn said(url: &str) -> String {
        match check(url, SCHEMES) {
            Err(LockError::InvalidArgument(message)) => message.into_owned(),
            other => panic!("{url:?}: {other:?}"),
        }
    }

    #[test]
    fn each_part_is_named() {
        for (url, part) in [
            ("redis//localhost", "scheme is missing"),
            ("", "scheme is missing"),
            ("http://localhost", "scheme \"http\""),
            ("redis://localhost:notaport", "port notaport"),
            ("redis://h:99999", "port 99999"),
            ("redis://h:0", "port 0"),
            ("redis://:6379", "host is missing"),
            ("redis://user:pw@:6379", "host is missing"),
            ("redis://[::1", "host opens an IPv6"),
            ("redis://h/abc", "database \"abc\""),
        ] {
            let message = said(url);
            assert!(message.contains(part), "{url:?}: {message}");
        }
        assert!(!said("redis://user:hunter2@:1").contains("hunter2"), "a password was shown");
    }

    #[test]
    fn good_urls_pass() {
        for url in [
            "redis://localhost",
            "REDIS://h:6379",
            "rediss://user:p@ss@h:6380/3",
            "redis://[::1]:6379",
            "redis://[::1]",
            "valkeys://h:1?protocol=resp3",
            "redis://h:6379/",
        ] {
            assert!(check(url, SCHEMES).is_ok(), "{url}");
        }
        assert!(check("redis+unix:///tmp/r.sock", &["redis+unix"]).is_ok());
    }
}
