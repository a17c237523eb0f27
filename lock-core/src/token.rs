//! Owner tokens (random, one per acquisition) and fencing tokens (increasing, one per acquisition).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::Instant;

use crate::holder::HolderLabel;

/// The random value that marks one acquisition as ours: 128 bits drawn from the operating system's random number
/// generator (`getrandom`) for every token, written as 32 lowercase hex digits.
///
/// Drawn from the OS each time, not from a user-space generator seeded once: after a `fork()` a copied generator
/// would hand parent and child the same tokens, and a release by one could then delete the other's lock.
///
/// Release and extend only touch a key that still holds this exact value, so a holder whose lock expired can never
/// delete or prolong the next holder's lock.
///
/// ```
/// let a = lock_core::Token::generate();
/// let b = lock_core::Token::generate();
/// assert_ne!(a, b);
/// assert_eq!(a.as_str().len(), 32);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token {
    hex: [u8; 32],
    /// With a [`HolderLabel`]: the whole value the server holds, `<hex> <label>` (shared: a guard, its watchdog and
    /// its in-flight release each keep a copy).
    labelled: Option<Arc<str>>,
}

impl Token {
    /// A fresh token with 128 random bits.
    pub fn generate() -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bits = random_u128();
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            let nibble = (bits >> (124 - 4 * i)) & 0xf;
            *byte = HEX[nibble as usize];
        }
        Token { hex: out, labelled: None }
    }

    /// A fresh token for an acquisition with `options` (labelled when they carry a holder label).
    pub(crate) fn generate_for(options: &crate::LockOptions) -> Self {
        match options.holder_label() {
            Some(label) => Token::generate().with_label(label),
            None => Token::generate(),
        }
    }

    /// This token with `label` stored after it (see [`HolderLabel`]): the value the server holds, and compares whole,
    /// is then `<hex> <label>`.
    ///
    /// ```
    /// let label = lock_core::HolderLabel::new("worker 3")?;
    /// let token = lock_core::Token::generate().with_label(&label);
    /// assert!(token.as_str().ends_with(" worker 3"));
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn with_label(self, label: &HolderLabel) -> Self {
        let mut value = String::with_capacity(33 + label.as_str().len());
        value.push_str(self.hex_str());
        value.push(' ');
        value.push_str(label.as_str());
        Token { hex: self.hex, labelled: Some(value.into()) }
    }

    fn hex_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.hex).unwrap_or_default()
    }

    /// The token a server holds as `text`, if it is one (32 lowercase hex digits, then optionally a space and a
    /// holder label): what a script's argument or a lock key holds, read back (by test stores that watch calls, say).
    ///
    /// ```
    /// use lock_core::Token;
    /// let token = Token::generate();
    /// assert_eq!(Token::parse(token.as_str()), Some(token));
    /// assert_eq!(Token::parse("not a token"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        Self::from_hex(text)
    }

    pub(crate) fn from_hex(text: &str) -> Option<Self> {
        let (hex, label) = match text.split_once(' ') {
            Some((hex, label)) => (hex, Some(label)),
            None => (text, None),
        };
        let bytes: [u8; 32] = hex.as_bytes().try_into().ok()?;
        if !bytes.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
            return None;
        }
        Some(Token { hex: bytes, labelled: label.map(|_| text.into()) })
    }

    /// The token as sent to the server (with its label, when it has one).
    pub fn as_str(&self) -> &str {
        match &self.labelled {
            Some(value) => value,
            None => self.hex_str(),
        }
    }
}

/// 128 bits from the operating system's random number generator.
///
/// Should the OS refuse (no entropy source on an exotic target), the value still differs from every other one this
/// process draws and, with overwhelming likelihood, from other processes' (a per-process counter, the process id,
/// the monotonic clock and the thread, hashed); that is logged once.
pub(crate) fn random_u128() -> u128 {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_ok() {
        return u128::from_le_bytes(bytes);
    }
    static WARNED: Once = Once::new();
    WARNED.call_once(|| tracing::error!("the OS random number generator failed; owner tokens use a fallback"));
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let since = EPOCH.get_or_init(Instant::now).elapsed().as_nanos();
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        // Fixed keys: no randomness is needed to keep distinct inputs apart.
        let mut h = std::hash::DefaultHasher::new();
        (i, count, std::process::id(), since, std::thread::current().id()).hash(&mut h);
        *half = h.finish();
    }
    (u128::from(halves[0]) << 64) | u128::from(halves[1])
}

/// Shows the owner id (the first [`OWNER_ID_LEN`](crate::OWNER_ID_LEN) hex digits, what `lockctl inspect` shows)
/// and the label, never the whole token: the token is a capability (whoever has it can release or extend the lock),
/// and a guard or error printed into a log must not hand it out. [`as_str`](Token::as_str) is the value itself.
///
/// ```
/// let token = lock_core::Token::generate();
/// let shown = format!("{token} {token:?}");
/// assert!(!shown.contains(token.as_str()));
/// assert!(shown.contains(&token.as_str()[..8]));
/// ```
impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let owner = self.hex_str().get(..crate::OWNER_ID_LEN).unwrap_or_default();
        match self.as_str().split_once(' ') {
            Some((_, label)) => write!(f, "{owner}… {label}"),
            None => write!(f, "{owner}…"),
        }
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({self})")
    }
}

/// A number that strictly increases with every acquisition of one resource.
///
/// Hand it to the resource you protect and have that resource reject writes carrying a token lower than the
/// highest it has seen: that turns "two processes believe they hold the lock" (after a pause or a partition) from
/// data corruption into a rejected write.
///
/// ```
/// use lock_core::FencingToken;
/// assert!(FencingToken::new(7) < FencingToken::new(8));
/// assert_eq!(FencingToken::new(7).get(), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw value (backends use this; users read tokens from guards).
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_hex_and_distinct() {
        let tokens: HashSet<Token> = (0..10_000).map(|_| Token::generate()).collect();
        assert_eq!(tokens.len(), 10_000);
        for t in tokens.iter().take(100) {
            assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
}
