//! Reading one sink's keys from the flat mapping users write: the sink's own keys, the
//! [`DeliveryOptions`] it takes and whatever the caller owns (herald's `name`) sit side by side;
//! start at [`read_sink`].
//!
//! The keys stream through the caller's `MapAccess`, so every error keeps its exact path
//! (`serde_path_to_error` cannot see into a buffered mapping), and a key nobody takes is refused
//! with every key the sink accepts, as one struct holding them all would list them.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::{DeliveryKeys, DeliveryOptions, SinkConfig};

/// Keys of a sink's mapping that belong to the caller, neither to the sink nor to its delivery
/// options (herald's `name`). `()` claims none.
pub trait OtherKeys<'de> {
    /// Whether `key` is one of them.
    fn claims(&self, key: &str) -> bool;

    /// Reads the value of `key`, one this claims, from `map`.
    ///
    /// # Errors
    /// The map's error for a value of the wrong type or form.
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

impl<'de> OtherKeys<'de> for () {
    fn claims(&self, _key: &str) -> bool {
        false
    }

    fn read<A: MapAccess<'de>>(&mut self, _key: &str, _map: &mut A) -> Result<(), A::Error> {
        Ok(())
    }
}

/// Reads the rest of `map` as a sink of type `C`: the delivery keys `C` takes into the returned
/// options, keys `other` claims into it, every other key into `C`.
///
/// # Errors
/// The map's error: a key neither takes (listing every key `C` accepts, its own and the delivery
/// keys), or `C`'s own error for a value or a missing key.
pub fn read_sink<'de, C, A, O>(map: &mut A, other: &mut O) -> Result<(C, DeliveryOptions), A::Error>
where
    C: SinkConfig + Deserialize<'de>,
    A: MapAccess<'de>,
    O: OtherKeys<'de>,
{
    let mut delivery = DeliveryOptions::new(C::DELIVERY);
    let config = C::deserialize(Rest {
        map,
        keys: C::DELIVERY,
        delivery: &mut delivery,
        other,
        fields: None,
    })?;
    Ok((config, delivery))
}

/// A sink's configuration and its delivery options, read from one mapping without `name` or
/// `type` (as [`read_sink`] reads them), for tools and tests that hold one sink's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flat<C> {
    /// The sink's own keys.
    pub config: C,
    /// The delivery keys.
    pub delivery: DeliveryOptions,
}

impl<'de, C: SinkConfig + Deserialize<'de>> Deserialize<'de> for Flat<C> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FlatVisitor(PhantomData))
    }
}

struct FlatVisitor<C>(PhantomData<C>);

impl<'de, C: SinkConfig + Deserialize<'de>> Visitor<'de> for FlatVisitor<C> {
    type Value = Flat<C>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sink's settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flat<C>, A::Error> {
        let (config, delivery) = read_sink(&mut map, &mut ())?;
        Ok(Flat { config, delivery })
    }
}

/// The keys left in the mapping, as a deserializer for the sink's configuration.
struct Rest<'a, A, O> {
    map: &'a mut A,
    keys: DeliveryKeys,
    delivery: &'a mut DeliveryOptions,
    other: &'a mut O,
    /// The configuration's own keys, as its derived `Deserialize` announces them.
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>, O: OtherKeys<'de>> Deserializer<'de> for Rest<'_, A, O> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.fields = Some(fields);
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

impl<'de, A: MapAccess<'de>, O: OtherKeys<'de>> MapAccess<'de> for Rest<'_, A, O> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = seed;
        loop {
            // The key goes through the caller's tracking `MapAccess`, so an unknown key is
            // reported with the key in the path.
            let key_seed = KeySeed {
                seed,
                claimed: &|key: &str| self.keys.takes(key) || self.other.claims(key),
                listed: self.fields.map(|fields| self.keys.listed(fields)),
            };
            match self.map.next_key_seed(key_seed)? {
                None => return Ok(None),
                Some(Key::Sink(value)) => return Ok(Some(value)),
                Some(Key::Claimed(key, returned)) => {
                    if !self.delivery.read(self.keys, &key, self.map)? {
                        self.other.read(&key, self.map)?;
                    }
                    seed = returned;
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key seed that recognizes the keys read here, refuses keys nobody takes, and hands every
/// other key to the configuration's seed.
struct KeySeed<'a, K> {
    seed: K,
    claimed: &'a dyn Fn(&str) -> bool,
    /// Every key the sink accepts, once its own are known.
    listed: Option<Vec<&'static str>>,
}

enum Key<K, V> {
    Sink(V),
    /// A key read here, with the unused seed handed back.
    Claimed(String, K),
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, K> {
    type Value = Key<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeySeed<'_, K> {
    type Value = Key<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if (self.claimed)(v) {
            return Ok(Key::Claimed(v.to_owned(), self.seed));
        }
        if let Some(listed) = &self.listed
            && !listed.contains(&v)
        {
            return Err(unknown_field(v, listed));
        }
        let key: de::value::StrDeserializer<'_, E> = de::IntoDeserializer::into_deserializer(v);
        self.seed.deserialize(key).map(Key::Sink)
    }
}

/// serde's unknown-field message over a list built at run time.
fn unknown_field<E: de::Error>(field: &str, expected: &[&str]) -> E {
    let quoted: Vec<String> = expected.iter().map(|key| format!("`{key}`")).collect();
    match quoted.as_slice() {
        [] => E::custom(format_args!("unknown field `{field}`, there are no fields")),
        [one] => E::custom(format_args!("unknown field `{field}`, expected {one}")),
        [a, b] => E::custom(format_args!("unknown field `{field}`, expected {a} or {b}")),
        all => E::custom(format_args!(
            "unknown field `{field}`, expected one of {}",
            all.join(", ")
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{Problems, SinkStart};
    use crate::sink::{Envelope, ErrorContext, Outcome, Sink, SinkError};

    /// A sink type with one key of its own and `start`.
    #[derive(Debug, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Spool {
        path: String,
    }

    struct Nowhere;

    impl Sink for Nowhere {
        const NAME: &'static str = "nowhere";

        async fn healthcheck(&self) -> Result<(), SinkError> {
            Ok(())
        }

        async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
            vec![Outcome::Ok; batch.len()]
        }

        async fn send_dead_letters(
            &self,
            letters: &[Envelope],
            _: &[ErrorContext],
        ) -> Vec<Outcome> {
            vec![Outcome::Ok; letters.len()]
        }
    }

    impl SinkConfig for Spool {
        type Sink = Nowhere;

        const DELIVERY: DeliveryKeys = DeliveryKeys::Start;

        fn validate(&self, _: &mut Problems) {}

        async fn build(&self, _: &str, _: &DeliveryOptions) -> Result<Nowhere, SinkError> {
            Ok(Nowhere)
        }
    }

    /// Claims `name`, as herald does.
    #[derive(Default)]
    struct Name(Option<String>);

    impl<'de> OtherKeys<'de> for Name {
        fn claims(&self, key: &str) -> bool {
            key == "name"
        }

        fn read<A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
            self.0 = Some(map.next_value()?);
            Ok(())
        }
    }

    struct Named(Name, Spool, DeliveryOptions);

    impl<'de> Deserialize<'de> for Named {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Named;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a named spool")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named, A::Error> {
                    let mut name = Name::default();
                    let (spool, delivery) = read_sink(&mut map, &mut name)?;
                    Ok(Named(name, spool, delivery))
                }
            }
            d.deserialize_map(V)
        }
    }

    fn error<T: for<'de> Deserialize<'de>>(value: serde_json::Value) -> String {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(_) => panic!("accepted"),
            Err(e) => format!("{}: {}", e.path(), e.inner()),
        }
    }

    #[test]
    fn keys_go_to_the_sink_the_delivery_options_and_the_caller() {
        let Named(name, spool, delivery) =
            serde_json::from_value(json!({"start": "earliest", "name": "a", "path": "/spool"}))
                .unwrap();
        assert_eq!(name.0.as_deref(), Some("a"));
        assert_eq!(
            spool,
            Spool {
                path: "/spool".into()
            }
        );
        assert_eq!(delivery.start, SinkStart::Earliest);
        let flat: Flat<Spool> = serde_json::from_value(json!({"path": "/spool"})).unwrap();
        assert_eq!(flat.delivery, DeliveryOptions::new(DeliveryKeys::Start));
    }

    #[test]
    fn errors_keep_their_key_and_list_every_key_the_sink_takes() {
        assert_eq!(
            error::<Flat<Spool>>(json!({"path": "/spool", "concurrency": 2})),
            "concurrency: unknown field `concurrency`, expected one of `path`, `rateLimit`, `debounce`, `start`"
        );
        assert_eq!(
            error::<Flat<Spool>>(json!({"path": "/spool", "name": "a"})),
            "name: unknown field `name`, expected one of `path`, `rateLimit`, `debounce`, `start`"
        );
        assert_eq!(
            error::<Named>(json!({"path": "/spool", "start": "latest"})),
            "start: unknown variant `latest`, expected `head` or `earliest`"
        );
        assert_eq!(
            error::<Named>(json!({"path": 5})),
            "path: invalid type: integer `5`, expected a string"
        );
    }
}
