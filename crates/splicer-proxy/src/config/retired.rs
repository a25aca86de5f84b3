//! Keys a configuration may still spell but that no longer mean anything. `[relay]` is read
//! as the relay's own [`RelayConfig`]; `experimental_sockmap` was required with
//! `engine = "sockmap"` until the program cut partly overlapping retransmissions
//! (docs/engines.md), so files written then still carry it. They keep loading: the key is
//! taken out of the table as it is read, its value still has to be a boolean, and every
//! other key goes to the relay's deserializer with the place it was written, so an error
//! names its own line, not the table's.

use serde::de::{DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use splicer_relay::RelayConfig;
use std::fmt;

/// The retired key of `[relay]`.
const RETIRED: &str = "experimental_sockmap";

/// Reads `[relay]`: the relay's configuration, without the retired key.
pub(super) fn relay_section<'de, D: Deserializer<'de>>(d: D) -> Result<RelayConfig, D::Error> {
    RelayConfig::deserialize(WithoutRetired(d))
}

/// A deserializer that hands the struct it reads a table without the retired key.
struct WithoutRetired<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for WithoutRetired<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(SkipRetired(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_struct(name, fields, SkipRetired(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The struct's visitor, given the table through [`Entries`].
struct SkipRetired<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for SkipRetired<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Entries(map))
    }
}

/// A table's entries with the retired one read (as a boolean) and passed over.
struct Entries<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        mut seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            match self.0.next_key_seed(Key(seed))? {
                None => return Ok(None),
                Some(Ok(key)) => return Ok(Some(key)),
                Some(Err(unused)) => {
                    self.0.next_value::<bool>()?;
                    seed = unused;
                }
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(seed)
    }
}

/// Reads one key inside the file's own key reader (so errors keep its place): the struct's
/// key, or the seed given back when the key is the retired one.
struct Key<K>(K);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for Key<K> {
    type Value = Result<K::Value, K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let name = String::deserialize(d)?;
        if name == RETIRED {
            return Ok(Err(self.0));
        }
        self.0.deserialize(name.into_deserializer()).map(Ok)
    }
}
