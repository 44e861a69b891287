//! herald's end-to-end tests: one binary of `mod` files; every test starts the real things it talks to.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

mod cli;
mod conformance;
mod deploy;
mod deploy_image;
mod fault_api;
mod fault_disk;
mod fault_embedded;
mod fault_fds;
mod fault_journal;
mod fault_names;
mod fault_oversize;
mod fault_start;
mod fault_watch;
mod helm_install;
mod install_rbac;
mod journal_compact;
mod run_acks;
mod run_admin;
mod run_admin_pod;
mod run_bus;
mod run_check;
mod run_delivery;
mod run_dlq;
mod run_events;
mod run_filters;
mod run_groups;
mod run_initial_skip;
mod run_leader;
mod run_memory;
mod run_rbac;
mod run_recipes;
mod run_recipes_audit;
mod run_recipes_ci;
mod run_reload;
mod run_replies;
mod run_retry_after;
mod run_supervisor;
mod run_templates;
mod run_webhook;
mod run_webhook_tls;
mod run_when;
mod sink_kafka;
mod sink_nats;
