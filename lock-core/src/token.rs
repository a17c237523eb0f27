//! Owner tokens (random, one per acquisition) and fencing tokens (increasing, one per acquisition).

use std::fmt;

/// The random value that marks one acquisition as ours: 128 bits from the thread-local CSPRNG of `rand`
/// (ChaCha, seeded from the operating system), written as 32 lowercase hex digits.
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
pub struct Token([u8; 32]);

impl Token {
    /// A fresh token with 128 random bits.
    pub fn generate() -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bits: u128 = rand::random();
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            let nibble = (bits >> (124 - 4 * i)) & 0xf;
            *byte = HEX[nibble as usize];
        }
        Token(out)
    }

    /// The token as sent to the server.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.as_str())
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
