//! How test cases fail: by panicking at the caller's line with the error they did not expect.

use std::time::Duration;

/// Test cases fail by panicking, with the caller's location.
pub(crate) trait OrPanic<T> {
    fn or_panic(self) -> T;
}

impl<T, E: std::fmt::Debug> OrPanic<T> for Result<T, E> {
    #[track_caller]
    fn or_panic(self) -> T {
        self.unwrap_or_else(|e| panic!("unexpected error: {e:?}"))
    }
}

impl<T> OrPanic<T> for Option<T> {
    #[track_caller]
    fn or_panic(self) -> T {
        self.unwrap_or_else(|| panic!("unexpected None"))
    }
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
