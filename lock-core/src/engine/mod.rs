//! The engine every primitive runs on, written once: a primitive says what it holds and which calls acquire,
//! extend and release it ([`primitive::Primitive`]); the engine waits for it ([`wait`], [`fair`]), holds it
//! (validity, renewal in [`watchdog`], the lost signal, give-back of a grant that cannot be used in [`inflight`]),
//! fences it, measures it, and operates on it ([`admin`]: inspect and force-release), on one store or over N
//! ([`redlock`]). [`lock`] holds the [`Lock`](crate::Lock) and its guards, where these meet.

pub(crate) mod admin;
pub(crate) mod fair;
pub(crate) mod inflight;
pub(crate) mod lock;
pub(crate) mod primitive;
pub mod redlock;
pub(crate) mod wait;
pub(crate) mod watchdog;
