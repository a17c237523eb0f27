//! Who holds a lock: the optional label stored with the owner token, so that an operator can tell.
//!
//! The lock key stays one plain string, `<token>` or `<token> <label>`, compared whole by the release and extend
//! scripts: a client that only knows `SET key value NX PX ttl` sees the same key semantics, and a holder's label
//! can never make another holder's compare succeed (the 128 random bits of the token come first). What
//! [`Lock::inspect`](crate::Lock::inspect) reads back is a [`Holder`](crate::Holder).

use std::fmt;
use std::sync::Arc;

use crate::error::{LockError, Result};

/// The longest holder label a job records (so a record stays small).
pub const MAX_HOLDER_LABEL: usize = 256;

/// A short, human-readable name of whoever acquires (host, pid, task), stored with the lock so that
/// [`Lock::inspect`](crate::Lock::inspect) and the `lockctl` tool can say who holds it.
///
/// 1 to [`MAX_HOLDER_LABEL`] bytes without control characters (it travels with every release and extend, so it
/// stays small). Set it with [`LockOptions::with_holder_label`](crate::LockOptions::with_holder_label).
///
/// ```
/// use lock_core::HolderLabel;
///
/// let label = HolderLabel::new("billing-7 pid 4121")?;
/// assert_eq!(label.as_str(), "billing-7 pid 4121");
/// assert!(HolderLabel::new("").is_err());
/// assert!(HolderLabel::new("line\nbreak").is_err());
/// assert!(HolderLabel::process().as_str().contains("pid"));
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderLabel(Arc<str>);

impl HolderLabel {
    /// Checks and wraps `label`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when it is empty, longer than [`MAX_HOLDER_LABEL`] bytes, or contains a
    /// control character (a newline would forge lines in logs and in `lockctl`'s output).
    pub fn new(label: impl Into<String>) -> Result<Self> {
        let label = label.into();
        if label.is_empty() || label.len() > MAX_HOLDER_LABEL {
            return Err(LockError::invalid(format!("a holder label must be 1 to {MAX_HOLDER_LABEL} bytes")));
        }
        if label.chars().any(char::is_control) {
            return Err(LockError::invalid("a holder label must not contain control characters"));
        }
        Ok(HolderLabel(label.into()))
    }

    /// This process: `"<host> pid <pid>"`, the host from `HOSTNAME` (set in containers and most shells), else
    /// `"host"`; cut to [`MAX_HOLDER_LABEL`] bytes, control characters replaced.
    pub fn process() -> Self {
        let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "host".to_owned());
        let mut label: String = format!("{host} pid {}", std::process::id())
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        while label.len() > MAX_HOLDER_LABEL {
            label.pop();
        }
        HolderLabel(label.into())
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for HolderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderLabel({:?})", &*self.0)
    }
}

impl fmt::Display for HolderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How many hex digits of the owner token an inspection shows: enough to tell acquisitions apart, far too few to
/// release or extend someone else's lock with.
pub const OWNER_ID_LEN: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_printable() {
        assert!(HolderLabel::new("a").is_ok());
        assert!(HolderLabel::new("x".repeat(MAX_HOLDER_LABEL)).is_ok());
        assert!(HolderLabel::new("x".repeat(MAX_HOLDER_LABEL + 1)).is_err());
        assert!(HolderLabel::new("tab\there").is_err());
        assert!(HolderLabel::new("🦀 worker 3").is_ok());
        assert!(HolderLabel::process().as_str().len() <= MAX_HOLDER_LABEL);
    }
}
