//! Finding 11: owner tokens must not repeat after `fork()`. A user-space generator seeded once (rand's thread
//! RNG) is copied into the child, so parent and child drew the same next tokens; tokens now come from the OS for
//! every draw. 256 tokens on each side, against a per-thread generator drawn from before the fork: with a
//! user-space generator that is not seeded again in the child, every one of the child's tokens is the parent's
//! (seen with a ChaCha12 generator per thread, issue 58). Alone in its test binary: the child of a multi-threaded
//! process runs only the forking thread.
#![cfg(unix)]
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)] // fork and pipes need libc; tests fail by panicking

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::FromRawFd;

use lock_core::Token;

const DRAWS: usize = 256;

#[test]
fn a_forked_child_never_draws_the_parents_tokens() {
    // Seed this thread's generator in the parent, so that the child inherits a state that is ready to draw.
    let before: Vec<Token> = (0..DRAWS).map(|_| Token::generate()).collect();
    let mut fds = [0; 2];
    // SAFETY: `pipe` writes two file descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child only draws tokens (no allocation, no lock another thread may hold), writes them to the pipe
    // with `write(2)`, and leaves with `_exit(2)`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        for _ in 0..DRAWS {
            let token = Token::generate();
            let line = token.as_str().as_bytes();
            // SAFETY: writes `line` (and a newline) to the pipe's write end, owned by this process.
            unsafe {
                libc::write(fds[1], line.as_ptr().cast(), line.len());
                libc::write(fds[1], b"\n".as_ptr().cast(), 1);
            }
        }
        // SAFETY: ends the child without running the parent's destructors or test harness.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closes the parent's copy of the write end, so the read below ends when the child exits.
    unsafe { libc::close(fds[1]) };
    let after: Vec<Token> = (0..DRAWS).map(|_| Token::generate()).collect();
    // SAFETY: the read end is this process's, and the `File` takes it over.
    let mut read = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    let mut text = String::new();
    read.read_to_string(&mut text).expect("read the child's tokens");
    let mut status = 0;
    // SAFETY: waits for the child started above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let child: Vec<&str> = text.lines().collect();
    assert_eq!(child.len(), DRAWS, "the child wrote every token");
    let parent: HashSet<&str> = before.iter().chain(&after).map(Token::as_str).collect();
    let repeated: Vec<&&str> = child.iter().filter(|t| parent.contains(**t)).collect();
    assert!(repeated.is_empty(), "{} of the child's {DRAWS} tokens are the parent's", repeated.len());
    let distinct: HashSet<&&str> = child.iter().collect();
    assert_eq!(distinct.len(), DRAWS);
}
