//! Users' passwords and how a login is checked against them.
//!
//! A password is kept as an Argon2id hash in PHC form (`$argon2id$v=19$m=...`, what
//! `splicer hash-password` prints), or, still accepted with a warning at start-up, in clear
//! text. A hash is checked by Argon2 itself (its output compared in constant time), on the
//! blocking pool: at the default cost one check takes tens of milliseconds of CPU. So that
//! only a client's first login pays it, a successful check is remembered for
//! [`REMEMBER`] as a keyed digest of the name and password (the key is random per process,
//! so the table says nothing about a password to anyone who reads it out of memory), as
//! Squid's `credentialsttl` does. A clear-text password is kept as its SHA-256 and compared
//! with the given one's in constant time. An unknown name is checked against a decoy of the
//! same kind, so it costs what a known one does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::User;

/// How long a successful check of a hashed password is remembered.
pub const REMEMBER: Duration = Duration::from_secs(600);

/// Remembered logins kept at most; past it, the expired ones go, then all (each costs a
/// new check, nothing else).
const REMEMBERED_MAX: usize = 4096;

type Digest32 = [u8; 32];

fn digest(b: &[u8]) -> Digest32 {
    Sha256::digest(b).into()
}

/// Whether a configured password is an Argon2 hash rather than clear text.
pub fn is_hash(password: &str) -> bool {
    password.starts_with("$argon2")
}

/// Why a configured hash cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an Argon2 hash in PHC form ($argon2id$v=19$m=...,t=...,p=...$salt$hash): {0}")]
pub struct BadHash(String);

/// Checks that `phc` is a hash this proxy can verify logins against.
pub fn check_hash(phc: &str) -> Result<(), BadHash> {
    let parsed = PasswordHash::new(phc).map_err(|e| BadHash(e.to_string()))?;
    if parsed.hash.is_none() {
        return Err(BadHash("no hash after the salt".into()));
    }
    // The parameters are read as Argon2 reads them when it verifies.
    argon2::Params::try_from(&parsed).map_err(|e| BadHash(e.to_string()))?;
    match parsed.algorithm.as_str() {
        "argon2id" | "argon2i" | "argon2d" => Ok(()),
        other => Err(BadHash(format!("algorithm {other}"))),
    }
}

/// Hashes `password` with Argon2id at its default cost and a random salt, in PHC form.
pub fn hash_password(password: &[u8]) -> Result<String, BadHash> {
    Argon2::default()
        .hash_password(password)
        .map(|h| h.to_string())
        .map_err(|e| BadHash(e.to_string()))
}

/// Whether `password` matches the PHC string `phc`.
fn verify(phc: &str, password: &[u8]) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| Argon2::default().verify_password(password, &h).is_ok())
}

/// A user's password as kept in memory.
#[derive(Clone)]
enum Stored {
    Hash(String),
    Clear(Digest32),
}

/// The user table.
pub struct Credentials {
    users: HashMap<String, Stored>,
    /// Checked against for an unknown name: a hash when any user has one.
    decoy: Stored,
    /// The key of the remembered logins' digests.
    key: Digest32,
    remembered: Mutex<HashMap<Digest32, Instant>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The users of a checked configuration (their hashes parse).
    pub fn new(users: &[User]) -> Credentials {
        let mut key = [0u8; 32];
        // No key from the OS: a fixed one still keys the digests (only their secrecy is lost).
        let _ = getrandom::fill(&mut key);
        let users: HashMap<String, Stored> = users
            .iter()
            .map(|u| {
                let stored = if is_hash(&u.password) {
                    Stored::Hash(u.password.clone())
                } else {
                    Stored::Clear(digest(u.password.as_bytes()))
                };
                (u.name.clone(), stored)
            })
            .collect();
        let any_hash = users.values().any(|s| matches!(s, Stored::Hash(_)));
        let decoy = match any_hash.then(|| hash_password(&key)) {
            Some(Ok(phc)) => Stored::Hash(phc),
            _ => Stored::Clear(digest(b"splicer: no such user")),
        };
        Credentials {
            users,
            decoy,
            key,
            remembered: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `name` (`None`: not UTF-8) is a user whose password is `password`.
    pub async fn check(&self, name: Option<&str>, password: &[u8]) -> bool {
        let stored = name.and_then(|n| self.users.get(n));
        let known = stored.is_some();
        match stored.unwrap_or(&self.decoy) {
            Stored::Clear(d) => {
                let same: bool = digest(password).ct_eq(d).into();
                same && known
            }
            Stored::Hash(phc) => {
                let seen = self.seen_digest(name.unwrap_or(""), password);
                if known && self.remembered(&seen) {
                    return true;
                }
                let (phc, given) = (phc.clone(), password.to_vec());
                let ok = tokio::task::spawn_blocking(move || verify(&phc, &given))
                    .await
                    .unwrap_or(false);
                if ok && known {
                    self.remember(seen);
                }
                ok && known
            }
        }
    }

    /// The keyed digest a successful login is remembered by.
    fn seen_digest(&self, name: &str, password: &[u8]) -> Digest32 {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update((name.len() as u64).to_be_bytes());
        h.update(name.as_bytes());
        h.update(password);
        h.finalize().into()
    }

    fn remembered(&self, seen: &Digest32) -> bool {
        let table = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        table.get(seen).is_some_and(|at| at.elapsed() < REMEMBER)
    }

    fn remember(&self, seen: Digest32) {
        let mut table = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() >= REMEMBERED_MAX {
            table.retain(|_, at| at.elapsed() < REMEMBER);
            if table.len() >= REMEMBERED_MAX {
                table.clear();
            }
        }
        table.insert(seen, Instant::now());
    }

    /// The users whose password is written in clear text.
    pub fn clear_text_users(&self) -> impl Iterator<Item = &str> {
        self.users
            .iter()
            .filter(|(_, s)| matches!(s, Stored::Clear(_)))
            .map(|(n, _)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, password: &str) -> User {
        User {
            name: name.into(),
            password: password.into(),
        }
    }

    #[test]
    fn a_hash_is_checked_and_what_is_not_one_is_refused() {
        let phc = hash_password(b"s3cret").unwrap();
        assert!(phc.starts_with("$argon2id$v=19$") && is_hash(&phc), "{phc}");
        assert_eq!(check_hash(&phc), Ok(()));
        assert!(verify(&phc, b"s3cret") && !verify(&phc, b"s3cre") && !verify(&phc, b""));
        // A salt of its own each time.
        assert_ne!(hash_password(b"s3cret").unwrap(), phc);
        for bad in [
            "$argon2id$nonsense",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ",
            "$argon2id$v=19$m=1,t=2,p=1$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaA",
            "$scrypt$ln=15,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2g",
        ] {
            assert!(check_hash(bad).is_err(), "{bad}");
        }
        assert!(!is_hash("$2b$12$bcryptbcryptbcrypt") && !is_hash("argon2"));
    }

    #[tokio::test]
    async fn logins_against_hashes_and_clear_text() {
        let phc = hash_password(b"s3cret").unwrap();
        let c = Credentials::new(&[user("alice", &phc), user("bob", "plain")]);
        assert!(matches!(c.decoy, Stored::Hash(_)));
        assert_eq!(c.clear_text_users().collect::<Vec<_>>(), ["bob"]);
        assert!(!c.check(Some("alice"), b"wrong").await);
        assert!(
            c.remembered.lock().unwrap().is_empty(),
            "a failure is not remembered"
        );
        assert!(c.check(Some("alice"), b"s3cret").await);
        // Remembered, keyed: the next login costs no Argon2 check, and the table holds no
        // plain digest of the password.
        let seen = c.seen_digest("alice", b"s3cret");
        assert!(c.remembered(&seen));
        assert!(!c.remembered(&digest(b"s3cret")));
        assert!(c.check(Some("alice"), b"s3cret").await);
        assert!(!c.check(Some("alice"), b"s3cret ").await);
        // The remembered digest is the name's and the password's together.
        assert!(!c.check(Some("bob"), b"s3cret").await);
        assert!(c.check(Some("bob"), b"plain").await);
        assert!(!c.check(Some("carol"), b"s3cret").await);
        assert!(!c.check(None, b"s3cret").await);
        // Clear text only: the decoy is a digest, so no unknown name costs a hash.
        let clear = Credentials::new(&[user("bob", "plain")]);
        assert!(matches!(clear.decoy, Stored::Clear(_)));
        assert!(!clear.check(Some("carol"), b"plain").await);
    }
}
