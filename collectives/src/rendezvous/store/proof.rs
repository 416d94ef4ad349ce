//! The challenge–response with which both ends of a store connection prove
//! they hold the job token without either one sending it.
//!
//! The client opens with a random nonce; the server answers with its own
//! nonce and `HMAC-SHA256(token, "server" label ‖ transcript)`; only if that
//! checks out does the client answer `HMAC-SHA256(token, "client" label ‖
//! transcript)`. The transcript holds both nonces, the rank and the world size,
//! so a proof cannot be replayed on another connection, and the two labels
//! differ, so a server's proof cannot be reflected back as a client's. Whoever
//! listens on the port without the token (another program on `MASTER_PORT`,
//! another job's store) therefore learns a nonce, a rank and a world size, and
//! nothing from which the token follows.
//!
//! The TCP transport's hello between two ranks runs the same exchange
//! ([`Transcript::mesh_server_proof`], [`Transcript::mesh_client_proof`]),
//! with its own domain bytes, so a proof from one protocol is worth nothing
//! in the other.

use sha2::{Digest, Sha256};

use super::token::Token;
use super::wire::{MAGIC, VERSION};
use crate::error::{Error, Result};

/// Bytes of a nonce.
pub(crate) const NONCE: usize = 16;
/// Bytes of a proof (one SHA-256 output).
pub(crate) const PROOF: usize = 32;

const SERVER_LABEL: &[u8] = b"ringside store proof: server\0";
const CLIENT_LABEL: &[u8] = b"ringside store proof: client\0";

/// Domain bytes of the transport's hello (see [`Transcript::mesh_server_proof`]).
const MESH_DOMAIN: &[u8] = b"ringside tcp mesh hello v2\0";

/// A fresh nonce from the operating system's generator.
pub(crate) fn nonce() -> Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n)
        .map_err(|e| Error::Rendezvous(format!("cannot draw a random nonce: {e}")))?;
    Ok(n)
}

/// What one handshake is about: both nonces, and who the client says it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transcript {
    pub(crate) client_nonce: [u8; NONCE],
    pub(crate) server_nonce: [u8; NONCE],
    /// The client's rank.
    pub(crate) rank: u64,
    pub(crate) world: u64,
}

impl Transcript {
    fn mac(&self, token: &Token, label: &[u8]) -> [u8; PROOF] {
        self.mac_in(token, label, &[MAGIC, &[VERSION]])
    }

    /// The MAC of this transcript under `token`, for `label` in the protocol
    /// that `domain` names. Every domain's bytes have a fixed length, and the
    /// fields after them too, so no two (domain, transcript) pairs share an
    /// input.
    fn mac_in(&self, token: &Token, label: &[u8], domain: &[&[u8]]) -> [u8; PROOF] {
        let (rank, world) = (self.rank.to_le_bytes(), self.world.to_le_bytes());
        let parts: Vec<&[u8]> = [label]
            .into_iter()
            .chain(domain.iter().copied())
            .chain([
                &self.client_nonce[..],
                &self.server_nonce[..],
                &rank[..],
                &world[..],
            ])
            .collect();
        hmac_sha256(&token.bytes(), &parts)
    }

    /// The TCP transport's acceptor's proof that it holds `token`, on a
    /// connection of the communicator whose store prefix hashes to
    /// `prefix_hash`, from the client rank to rank `target`.
    pub(crate) fn mesh_server_proof(
        &self,
        token: &Token,
        prefix_hash: u64,
        target: u64,
    ) -> [u8; PROOF] {
        self.mac_in(
            token,
            SERVER_LABEL,
            &[
                MESH_DOMAIN,
                &prefix_hash.to_le_bytes(),
                &target.to_le_bytes(),
            ],
        )
    }

    /// The TCP transport's dialling rank's proof (see
    /// [`Transcript::mesh_server_proof`]).
    pub(crate) fn mesh_client_proof(
        &self,
        token: &Token,
        prefix_hash: u64,
        target: u64,
    ) -> [u8; PROOF] {
        self.mac_in(
            token,
            CLIENT_LABEL,
            &[
                MESH_DOMAIN,
                &prefix_hash.to_le_bytes(),
                &target.to_le_bytes(),
            ],
        )
    }

    /// The server's proof that it holds `token`.
    pub(super) fn server_proof(&self, token: &Token) -> [u8; PROOF] {
        self.mac(token, SERVER_LABEL)
    }

    /// The client's proof that it holds `token`.
    pub(super) fn client_proof(&self, token: &Token) -> [u8; PROOF] {
        self.mac(token, CLIENT_LABEL)
    }
}

/// Compares without stopping at the first differing byte, so response timing
/// does not reveal how much of a forged proof was right.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key`; a dozen
/// lines over `sha2` rather than one more dependency.
pub(super) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; PROOF] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..PROOF].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 4231 test cases 1, 2 and 6 (a key longer than a block).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], &[b"Hi ", b"There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", &[b"what do ya want for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    /// A server's proof is no client's proof, and each depends on the
    /// token, both nonces, the rank and the world size.
    #[test]
    fn proofs_bind_the_token_the_nonces_and_the_member() {
        let token = Token::from_bytes([5; 16]);
        let t = Transcript {
            client_nonce: [1; NONCE],
            server_nonce: [2; NONCE],
            rank: 1,
            world: 2,
        };
        let base = t.server_proof(&token);
        assert_ne!(base, t.client_proof(&token));
        assert_ne!(base, t.server_proof(&Token::from_bytes([6; 16])));
        let changed = [
            Transcript {
                client_nonce: [3; NONCE],
                ..t
            },
            Transcript {
                server_nonce: [3; NONCE],
                ..t
            },
            Transcript { rank: 0, ..t },
            Transcript { world: 3, ..t },
        ];
        for other in changed {
            assert_ne!(base, other.server_proof(&token));
        }
        // The transport's hello is another domain: no proof carries over.
        assert_ne!(base, t.mesh_server_proof(&token, 0, 0));
        assert_ne!(
            t.mesh_server_proof(&token, 1, 0),
            t.mesh_server_proof(&token, 1, 1)
        );
        assert_ne!(
            t.mesh_server_proof(&token, 1, 0),
            t.mesh_client_proof(&token, 1, 0)
        );
        assert!(same(&base, &t.server_proof(&token)));
        assert!(!same(&base, &base[..31]));
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
