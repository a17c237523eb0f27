#![doc = include_str!(concat!(env!("OUT_DIR"), "/guide/mod.md"))]

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/01_what_a_lock_is.md"))]
pub mod what_a_lock_is {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/02_the_pause.md"))]
pub mod the_pause {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/03_fencing.md"))]
pub mod fencing {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/04_timing.md"))]
pub mod timing {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/05_deployments.md"))]
pub mod deployments {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/06_waiting.md"))]
pub mod waiting {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/07_choosing.md"))]
pub mod choosing {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/08_operating.md"))]
pub mod operating {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/09_when_not_to_lock.md"))]
pub mod when_not_to_lock {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/10_connecting.md"))]
pub mod connecting {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/11_backends.md"))]
pub mod backends {}

#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide/12_redis_or_etcd.md"))]
pub mod redis_or_etcd {}
