//! Finding 11: owner tokens must not repeat after `fork()`. A user-space generator seeded once (rand's thread
//! RNG) is copied into the child, so parent and child drew the same next tokens; tokens now come from the OS for
//! every draw.
#![cfg(unix)]
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)] // fork and pipes need libc; tests fail by panicking

use lock_core::Token;

#[test]
fn parent_and_child_draw_different_tokens_after_fork() {
    // Draw once first, so any per-thread generator is seeded before the fork.
    let _ = Token::generate();
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only draws a token (no allocation), writes it to the pipe and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let token = Token::generate();
        let bytes = token.as_str().as_bytes();
        // SAFETY: writes `bytes` to the pipe's write end, then leaves without running any destructor.
        unsafe {
            libc::write(fds[1], bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0);
        }
    }
    let parent = Token::generate();
    let mut buf = [0u8; 32];
    let mut read = 0;
    while read < buf.len() {
        // SAFETY: reads into the unfilled rest of `buf` from the pipe's read end.
        let n = unsafe { libc::read(fds[0], buf[read..].as_mut_ptr().cast(), buf.len() - read) };
        assert!(n > 0, "the child wrote no token");
        read += usize::try_from(n).unwrap();
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let child = std::str::from_utf8(&buf).unwrap();
    assert_ne!(child, parent.as_str(), "parent and child drew the same token after fork");
}
