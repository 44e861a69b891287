//! The simulator's tests: one binary of `mod` files; every test starts its own simulator and talks to
//! it as a client would (raw HTTP, kube-rs, kubectl).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

mod sim_apply;
mod sim_auth;
mod sim_builtins;
mod sim_bulk;
mod sim_crd;
mod sim_faults;
mod sim_kinds;
mod sim_kube;
mod sim_kubectl;
mod sim_list;
mod sim_persist;
mod sim_watch;
mod sim_writes;
