//! The engine every primitive runs on, written once: a primitive says what it holds and which calls acquire,
//! extend and release it ([`primitive::Primitive`]); the engine waits for it ([`wait`], [`fair`]), holds it
//! (validity, renewal in [`watchdog`], the lost signal), gives back what it cannot use and decides when a give-back
//! may run ([`give_back`]), fences it, measures it, and operates on it ([`admin`]: inspect and force-release), on
//! one store or over N ([`instances`], [`redlock`]). [`lock`] holds the [`Lock`](crate::Lock) and its guards, where
//! these meet.

pub(crate) mod admin;
pub(crate) mod fair;
pub(crate) mod give_back;
pub(crate) mod instances;
pub(crate) mod lock;
pub(crate) mod primitive;
pub mod redlock;
pub(crate) mod wait;
pub(crate) mod watchdog;
pub(crate) mod wire_check;
