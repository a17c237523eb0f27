//! CPU time used by this process (the client side of every contender), from `getrusage`.

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

/// User plus system CPU time of the whole process (all threads) so far.
pub(crate) fn process_time() -> io::Result<Duration> {
    let mut usage = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct behind the pointer, which points to enough zeroed, writable memory; the
    // value is read only after the call reported success.
    #[allow(unsafe_code)]
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        usage.assume_init()
    };
    Ok(timeval(usage.ru_utime) + timeval(usage.ru_stime))
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}
