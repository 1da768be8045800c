//! The keys a configuration struct accepts, read from the struct itself (serde's derive lists
//! its field names, renames applied): what the generated reference lists for each table, so the
//! book names exactly the keys the parser takes. Reads nothing; writes nothing.

use serde::de::{DeserializeOwned, Visitor};
use std::cell::Cell;

/// A function giving one table's keys (`keys_of::<T>`), as the stage and source registry holds it.
pub type KeysFn = fn() -> &'static [&'static str];

/// The keys a configuration struct accepts, as serde's derive names them (renames applied).
pub fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let seen = Cell::new(&[][..]);
    let _ = T::deserialize(FieldNames(&seen));
    seen.get()
}

/// A deserializer that only records the field list a derived struct asks for, then stops.
struct FieldNames<'a>(&'a Cell<&'static [&'static str]>);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.set(fields);
        Err(serde::de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
