//! A stored object's answer head as bytes, made once and copied per hit.
//!
//! A plain hit (a `GET` without conditions or a range, answered whole) gets the same head
//! every time but for its `Age`, its `Connection` and its `Cache-Status`. Building it anew
//! per hit (the stored fields copied, framed again, `Via` added, encoded) was about a tenth
//! of the proxy's CPU per hit. The front end that serves the object makes the bytes once,
//! by the very path a hit took before, and keeps them here; what changes per hit is
//! written around them.

use std::sync::OnceLock;

/// The bytes of a plain hit's head around its `Age` field, for the front end named `via`.
#[derive(Debug, PartialEq, Eq)]
pub struct HitHead {
    /// The name in `Via` and `Cache-Status` it was made for.
    pub via: Box<str>,
    /// The status line and every field before `Age`.
    pub before_age: Box<[u8]>,
    /// The fields after `Age` (`Content-Length`, `Via`), without the head's closing line.
    pub after_age: Box<[u8]>,
}

impl HitHead {
    pub fn len(&self) -> usize {
        self.before_age.len() + self.after_age.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where an object keeps its [`HitHead`] once made (`None`: it cannot be made, so hits
/// take the long way). A copy of an object starts empty: whoever copies one may change
/// its fields, and a head made for the original would be stale. (The store itself never
/// copies an object: a revalidation or a fill builds a new one, which starts empty too.)
#[derive(Default)]
pub struct HitHeadSlot(OnceLock<Option<HitHead>>);

impl HitHeadSlot {
    /// The head, made by `make` on first use.
    pub fn get_or_make(&self, make: impl FnOnce() -> Option<HitHead>) -> Option<&HitHead> {
        self.0.get_or_init(make).as_ref()
    }
}

impl Clone for HitHeadSlot {
    fn clone(&self) -> Self {
        HitHeadSlot::default()
    }
}

impl std::fmt::Debug for HitHeadSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.get() {
            None => "not made",
            Some(None) => "cannot be made",
            Some(Some(_)) => "made",
        };
        f.write_str(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_and_not_copied() {
        let slot = HitHeadSlot::default();
        let made = || {
            Some(HitHead {
                via: "s".into(),
                before_age: b"HTTP/1.1 200 OK\r\n".to_vec().into(),
                after_age: b"Via: 1.1 s\r\n".to_vec().into(),
            })
        };
        assert_eq!(slot.get_or_make(made).map(HitHead::len), Some(29));
        let again = slot.get_or_make(|| panic!("made twice"));
        assert_eq!(again.map(|h| &*h.via), Some("s"));
        let copy = slot.clone();
        assert_eq!(copy.get_or_make(|| None), None, "a copy starts empty");
    }
}
