//! The TCP key-value store rank 0 hosts, and the job token that guards it.
//!
//! Rank 0 runs a [`StoreServer`]; every rank (rank 0 too) talks to it through a
//! [`TcpStore`], which implements [`Store`](crate::rendezvous::Store). The
//! server keeps everything in memory, walks new connections through their
//! hello on one thread (strangers cost no thread, and the longest-silent is
//! closed when too many wait), and serves each connection that proved the
//! token on its own thread, so a `get` that waits for a key blocks only its
//! own connection.
//!
//! - `token.rs`: the job token.
//! - `proof.rs`: the challenge–response in which the server, then the client,
//!   proves it holds the token.
//! - `wire.rs`: the framing and message layout both sides speak.
//! - `server.rs`: the store rank 0 hosts.
//! - `client.rs`: every rank's connection to it.
//!
//! The token never travels: each side proves it holds it with an HMAC over
//! fresh nonces, the server first, so a rank that dials the wrong service
//! (another program squatting on `MASTER_PORT`) gives nothing away. The
//! requests that follow are neither encrypted nor authenticated one by one:
//! the store keeps other jobs and strangers out, not an attacker who can
//! read or rewrite the network.

mod client;
pub(crate) mod proof;
mod server;
mod token;
mod wire;

/// Also the fixtures (a loopback server, its clients) other modules' tests use.
#[cfg(test)]
pub(crate) mod tests;

pub use client::TcpStore;
pub use server::StoreServer;
pub(crate) use token::env_var;
pub use token::{TOKEN_VAR, Token};
