//! Text an operator's terminal shows: what a server holds is data, never control sequences.

/// `text` with every control character escaped (`\n`, `\t`, `\u{1b}` …): a label, a record's value or an error
/// message written by someone else must not forge output lines or drive the terminal (an escape sequence can hide
/// the rest of it).
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A server URL as it may be printed: its credentials left out.
pub(crate) fn url_shown(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    if scheme.is_empty() {
        shown(host)
    } else {
        shown(&format!("{scheme}://{host}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(shown("10.0.0.7:9000\nstate     free"), "10.0.0.7:9000\\nstate     free");
        assert_eq!(shown("a\u{1b}[8mb"), "a\\u{1b}[8mb");
        assert_eq!(shown("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn credentials_are_never_printed() {
        assert_eq!(url_shown("redis://:hunter2@127.0.0.1:6379/0"), "redis://127.0.0.1:6379");
        assert_eq!(url_shown("rediss://ops:pw@h:1"), "rediss://h:1");
        assert_eq!(url_shown("redis://h:1"), "redis://h:1");
    }
}
