//! The pause-and-fence demonstration (`cargo run -p examples --bin pause_and_fence`): a client frozen past its lease
//! writes after the next holder; without the fence the storage takes the stale write, with it the storage refuses it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use lock_testkit::RedisServer;

#[test]
fn the_stale_write_lands_without_the_fence_and_is_refused_with_it() {
    let server = RedisServer::start().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pause_and_fence"))
        .env("REDIS_URL", server.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("RESULT fenced=false stale_write=landed"), "{stdout}");
    assert!(stdout.contains("RESULT fenced=true stale_write=refused"), "{stdout}");
    // The storage said so itself: it took client-1's late write in the first run and refused it in the second.
    assert!(stdout.contains("storage: accepted client-1's write"), "{stdout}");
    assert!(stdout.contains("storage: REFUSED client-1's write"), "{stdout}");
}
